// Device code compiled by hipcc against rfbase's header: the kernel scales by the factor the
// host reads from rfbase's library (so this object needs both the header and librfbase.so).
#include <hip/hip_runtime.h>
#include <rfbase.h>

__global__ void rfusehip_scale_kernel(long long* data, int n, int factor) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] *= factor;
}

// The factor the kernel would use: rfbase's RFBASE_SCALE, through its C API.
extern "C" int rfusehip_factor(void) { return rfbase_scale(); }
