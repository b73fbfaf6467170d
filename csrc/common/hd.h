// Marks functions shared by device code and the plain C++ (CPU) path.
#pragma once

#if defined(__CUDACC__)
#define TCGEMM_HD __host__ __device__ __forceinline__
#else
#define TCGEMM_HD inline
#endif
