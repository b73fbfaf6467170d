// Device time per launch of a CUDA graph for the standalone probes in scripts/dev: `launches`
// calls of one(i) captured on `stream`, the graph replayed `warmup` times and then `replays`
// times between two events; the median replay over `launches`, in microseconds.
#pragma once

#include <algorithm>
#include <functional>
#include <vector>

#include <cuda_runtime.h>

#include "common/cuda_check.h"

inline float graph_us_per_launch(cudaStream_t stream, int launches, const std::function<void(int)>& one,
                                 int replays = 7, int warmup = 2) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  TCGEMM_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < launches; ++i) one(i);
  TCGEMM_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  TCGEMM_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t e0, e1;
  TCGEMM_CUDA_CHECK(cudaEventCreate(&e0));
  TCGEMM_CUDA_CHECK(cudaEventCreate(&e1));
  std::vector<float> us;
  for (int r = 0; r < warmup + replays; ++r) {
    TCGEMM_CUDA_CHECK(cudaEventRecord(e0, stream));
    TCGEMM_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    TCGEMM_CUDA_CHECK(cudaEventRecord(e1, stream));
    TCGEMM_CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    TCGEMM_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    if (r >= warmup) us.push_back(ms * 1000.0f / launches);
  }
  TCGEMM_CUDA_CHECK(cudaEventDestroy(e0));
  TCGEMM_CUDA_CHECK(cudaEventDestroy(e1));
  TCGEMM_CUDA_CHECK(cudaGraphExecDestroy(exec));
  TCGEMM_CUDA_CHECK(cudaGraphDestroy(graph));
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}
