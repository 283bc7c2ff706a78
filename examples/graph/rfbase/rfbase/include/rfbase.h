/* rfbase: the C API shipped inside the rfbase wheel (usable from C, C++ and HIP). */
#ifndef RFBASE_H
#define RFBASE_H
#ifdef __cplusplus
extern "C" {
#endif
int rfbase_scale(void);
long long rfbase_scaled(long long x);
#ifdef __cplusplus
}
#endif
#endif
