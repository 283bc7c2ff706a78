/* librfbase.so: RFBASE_SCALE is a build flag of the package (its recipe's [env]). */
#include "rfbase.h"
#ifndef RFBASE_SCALE
#define RFBASE_SCALE 1
#endif
int rfbase_scale(void) { return RFBASE_SCALE; }
long long rfbase_scaled(long long x) { return x * RFBASE_SCALE; }
