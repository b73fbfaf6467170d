// Throughput of the per-block promotion's arithmetic on one GPU, in accumulators per clock per
// SM: accf += float(partial) * scale, as the sm90 per-block kernel runs it (I2FP + FFMA), against
// FFMA alone. docs/design/scaled.md quotes the figures. The inputs do not change across
// iterations: check in the SASS (cuobjdump -sass) that each loop body still holds 64 I2FP / FFMA,
// as it did with nvcc 13.0 (a magic-number variant, IADD + FADD + FFMA, was hoisted out of the
// loop whole and is not measured here). Timed in clock cycles inside the kernel (clock64), so the
// figure does not depend on the clock the SM runs at.
//
//   nvcc -O3 -arch=sm_90a scripts/dev/alu_rates.cu -o /tmp/alu_rates && /tmp/alu_rates
#include <cstdio>
#include <cstdlib>

#include <cuda_runtime.h>

#define CHECK(x)                                                                  \
  do {                                                                            \
    cudaError_t e_ = (x);                                                         \
    if (e_ != cudaSuccess) {                                                      \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                               \
    }                                                                             \
  } while (0)

constexpr int kElems = 64;   // accumulators per thread, as a 64x128 warpgroup piece holds
constexpr int kIters = 2048;
constexpr int kThreads = 256;

enum Op { kI2fFfma, kFfma };

__device__ __forceinline__ float i2f(int x) {
  float f;
  asm volatile("cvt.rn.f32.s32 %0, %1;" : "=f"(f) : "r"(x));
  return f;
}

template <Op OP>
__global__ void __launch_bounds__(kThreads) rate_kernel(const int* in, float* out, long long* cycles, float scale) {
  int x[kElems];
  float acc[kElems];
#pragma unroll
  for (int j = 0; j < kElems; ++j) {
    x[j] = in[(threadIdx.x + j) % 64];
    acc[j] = 0.f;
  }
  __syncthreads();
  const long long t0 = clock64();
  for (int it = 0; it < kIters; ++it) {
#pragma unroll
    for (int j = 0; j < kElems; ++j) {
      if constexpr (OP == kI2fFfma) acc[j] = fmaf(i2f(x[j]), scale, acc[j]);
      if constexpr (OP == kFfma) acc[j] = fmaf(__int_as_float(x[j]), scale, acc[j]);
    }
  }
  __syncthreads();
  const long long t1 = clock64();
  float s = 0.f;
#pragma unroll
  for (int j = 0; j < kElems; ++j) s += acc[j];
  out[blockIdx.x * kThreads + threadIdx.x] = s;
  if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
}

template <Op OP>
void run(const char* name, int sms, const int* in, float* out, long long* cycles) {
  int per_sm = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, rate_kernel<OP>, kThreads, 0));
  const int blocks = per_sm * sms;
  rate_kernel<OP><<<blocks, kThreads>>>(in, out, cycles, 0.5f);  // warm-up
  CHECK(cudaGetLastError());
  rate_kernel<OP><<<blocks, kThreads>>>(in, out, cycles, 0.5f);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  long long* h = new long long[blocks];
  CHECK(cudaMemcpy(h, cycles, sizeof(long long) * blocks, cudaMemcpyDeviceToHost));
  long long most = 0;
  for (int b = 0; b < blocks; ++b) most = h[b] > most ? h[b] : most;
  delete[] h;
  // Every SM runs per_sm blocks at once over (about) the same cycles.
  const double lanes = double(per_sm) * kThreads * kIters * kElems;
  std::printf("%-28s %6.1f elements per clock per SM (%d blocks of %d threads per SM)\n", name, lanes / most, per_sm,
              kThreads);
}

int main() {
  int dev = 0, sms = 0;
  CHECK(cudaGetDevice(&dev));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  int* in;
  float* out;
  long long* cycles;
  CHECK(cudaMalloc(&in, 64 * sizeof(int)));
  int h_in[64];
  for (int i = 0; i < 64; ++i) h_in[i] = (i * 7919) % 4001 - 2000;
  CHECK(cudaMemcpy(in, h_in, sizeof(h_in), cudaMemcpyHostToDevice));
  CHECK(cudaMalloc(&out, sizeof(float) * kThreads * sms * 16));
  CHECK(cudaMalloc(&cycles, sizeof(long long) * sms * 16));
  run<kFfma>("FFMA", sms, in, out, cycles);
  run<kI2fFfma>("I2FP + FFMA (the promotion)", sms, in, out, cycles);
  return 0;
}
