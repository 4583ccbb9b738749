/* The two functions the library takes from the C runtime. Declared here rather than through
 * <string.h>, so that a bare-metal toolchain without a C library builds it; every freestanding
 * GCC and Clang target provides them (the compilers themselves emit calls to them). */
#ifndef AIRC_MEM_H
#define AIRC_MEM_H

#include <stddef.h>

void *memcpy(void *dest, const void *src, size_t n);
void *memset(void *dest, int c, size_t n);

#endif /* AIRC_MEM_H */
