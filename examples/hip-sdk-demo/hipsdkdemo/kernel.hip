// The device code: add two float vectors. Host wrappers are extern "C" for the C extension.
#include <hip/hip_runtime.h>
#include <stddef.h>

__global__ void hipdemo_add_kernel(const float* a, const float* b, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}

extern "C" const char* hipdemo_error_name(int err) { return hipGetErrorName((hipError_t)err); }
extern "C" const char* hipdemo_error_string(int err) { return hipGetErrorString((hipError_t)err); }

extern "C" int hipdemo_device_count(int* count) { return (int)hipGetDeviceCount(count); }

// Returns a hipError_t; out is written only on success.
extern "C" int hipdemo_add(const float* a, const float* b, float* out, int n) {
  float *da = NULL, *db = NULL, *dout = NULL;
  size_t bytes = (size_t)n * sizeof(float);
  int count = 0;
  hipError_t err = hipGetDeviceCount(&count);  // no GPU: hipErrorNoDevice, not a failed malloc
  if (err == hipSuccess && count == 0) err = hipErrorNoDevice;
  if (err == hipSuccess) err = hipMalloc((void**)&da, bytes);
  if (err == hipSuccess) err = hipMalloc((void**)&db, bytes);
  if (err == hipSuccess) err = hipMalloc((void**)&dout, bytes);
  if (err == hipSuccess) err = hipMemcpy(da, a, bytes, hipMemcpyHostToDevice);
  if (err == hipSuccess) err = hipMemcpy(db, b, bytes, hipMemcpyHostToDevice);
  if (err == hipSuccess) {
    hipLaunchKernelGGL(hipdemo_add_kernel, dim3((n + 255) / 256), dim3(256), 0, 0, da, db, dout, n);
    err = hipGetLastError();
  }
  if (err == hipSuccess) err = hipMemcpy(out, dout, bytes, hipMemcpyDeviceToHost);
  if (dout) (void)hipFree(dout);
  if (db) (void)hipFree(db);
  if (da) (void)hipFree(da);
  return (int)err;
}
