/* rfbase: the C API shipped inside the rfbase wheel. */
#ifndef RFBASE_H
#define RFBASE_H
int rfbase_scale(void);
long long rfbase_scaled(long long x);
#endif
