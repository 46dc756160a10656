/* bench_check.h — the benchmark programs' (bench/bench_*.c) error checks: a failed CUDA
 * call (CK) or library call (PK) prints where and why on stderr and exits with status 1.
 * For the stand-alone benchmark programs only: the library never prints or exits. */
#ifndef PW_BENCH_CHECK_H
#define PW_BENCH_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime.h>

#include "pageweaver.h"

#define CK(x)                                                                               \
    do {                                                                                    \
        cudaError_t e_ = (x);                                                               \
        if (e_ != cudaSuccess) {                                                            \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(1);                                                                        \
        }                                                                                   \
    } while (0)
#define PK(x)                                                                               \
    do {                                                                                    \
        pw_status_t s_ = (x);                                                               \
        if (s_ != PW_SUCCESS) {                                                             \
            fprintf(stderr, "%s:%d %s: %s: %s\n", __FILE__, __LINE__, #x, pw_status_string(s_), \
                    pw_last_error());                                                       \
            exit(1);                                                                        \
        }                                                                                   \
    } while (0)

#endif
