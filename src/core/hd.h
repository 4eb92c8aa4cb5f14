// SLUICE_HD marks functions compiled for both the host and the device: the math that E3 needs
// to give the same bits on the CPU and the GPU is written once, here and in src/kernels/math.h.
#pragma once

#if defined(__CUDACC__)
#define SLUICE_HD __host__ __device__
#else
#define SLUICE_HD
#endif
