#include "kernels/sm90/sm90_tensor_map.h"

#include <array>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>

#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include "common/cuda_check.h"
#include "common/int4.h"
#include "common/math.h"

namespace tcgemm::sm90 {
namespace {

// cuTensorMapEncodeTiled lives in the driver library; the runtime hands out its address, so the
// extension needs no link against libcuda.
PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    TCGEMM_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault,
                                                       &found));
    if (found == cudaDriverEntryPointSuccess) fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(ptr);
  });
  if (fn == nullptr) throw std::runtime_error("tcgemm: the CUDA driver does not provide cuTensorMapEncodeTiled");
  return fn;
}

int64_t row_stride_bytes(const Operand& op, int64_t rows, int64_t k) {
  // A single row is never stepped over: give TMA any legal stride.
  return rows == 1 ? round_up<int64_t>(k, 16) : op.stride_row;
}

// Everything a descriptor is encoded from: equal keys give equal descriptors.
struct MapKey {
  const void* ptr;
  int64_t cols, rows, stride_bytes;
  int box_cols, box_rows;
  CUtensorMapDataType type;
  CUtensorMapL2promotion promotion;
  CUtensorMapSwizzle swizzle;
  bool operator==(const MapKey& o) const {
    return ptr == o.ptr && cols == o.cols && rows == o.rows && stride_bytes == o.stride_bytes &&
           box_cols == o.box_cols && box_rows == o.box_rows && type == o.type && promotion == o.promotion &&
           swizzle == o.swizzle;
  }
};

// The last descriptors this thread encoded. A descriptor is a pure function of its key (nothing
// of the memory it describes is read), so a hit is exactly what encoding would give; it saves the
// driver call (about a microsecond of host time) for the weights a layer reuses on every call
// and the activation and output buffers the caching allocator hands out again.
class MapCache {
 public:
  const CUtensorMap* find(const MapKey& key) const {
    for (int i = 0; i < used_; ++i)
      if (keys_[i] == key) return &maps_[i];
    return nullptr;
  }
  void insert(const MapKey& key, const CUtensorMap& map) {
    keys_[next_] = key;
    maps_[next_] = map;
    next_ = (next_ + 1) % kEntries;
    used_ = used_ < kEntries ? used_ + 1 : kEntries;
  }

 private:
  static constexpr int kEntries = 32;
  std::array<MapKey, kEntries> keys_{};
  std::array<CUtensorMap, kEntries> maps_{};
  int used_ = 0;
  int next_ = 0;
};

// A 2-D row-major tensor [rows, cols] (cols contiguous) read or written in [box_rows, box_cols]
// boxes with the given swizzle. Throws std::runtime_error naming the operand (`operand`, or the
// output where null) if the driver refuses.
CUtensorMap encode_2d(CUtensorMapDataType type, const void* ptr, int64_t cols, int64_t rows, int64_t stride_bytes,
                      int box_cols, int box_rows, CUtensorMapL2promotion promotion, const char* operand,
                      CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_128B) {
  thread_local MapCache cache;
  const MapKey key{ptr, cols, rows, stride_bytes, box_cols, box_rows, type, promotion, swizzle};
  if (const CUtensorMap* hit = cache.find(key)) return *hit;
  CUtensorMap map{};
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(stride_bytes)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(box_cols), static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult status =
      encode_tiled()(&map, type, 2, const_cast<void*>(ptr), dims, strides, box, element_strides,
                     CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, promotion, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (status != CUDA_SUCCESS) {
    const std::string what = operand != nullptr ? std::string("operand '") + operand + "'" : std::string("output");
    throw std::runtime_error(std::string("tcgemm: cuTensorMapEncodeTiled failed (CUresult ") +
                             std::to_string(static_cast<int>(status)) + ") for " + what + " [" + std::to_string(rows) +
                             ", " + std::to_string(cols) + "] with row stride " + std::to_string(stride_bytes) +
                             " bytes");
  }
  cache.insert(key, map);
  return map;
}

}  // namespace

bool tma_describable(const Operand& op, int64_t rows, int64_t k) {
  if (!op.k_major() || reinterpret_cast<uintptr_t>(op.ptr) % 16 != 0) return false;
  const int64_t stride = row_stride_bytes(op, rows, k);
  return stride % 16 == 0 && stride >= k && stride < (int64_t{1} << 40);
}

CUtensorMap make_operand_tensor_map(const Operand& op, int64_t rows, int64_t k, int box_rows, const char* name) {
  return encode_2d(CU_TENSOR_MAP_DATA_TYPE_UINT8, op.ptr, k, rows, row_stride_bytes(op, rows, k), 128, box_rows,
                   CU_TENSOR_MAP_L2_PROMOTION_L2_256B, name);
}

bool packed_tma_describable(const Operand& op, int64_t rows, int64_t k) {
  return tma_describable(op, rows, ceil_div<int64_t>(k, kInt4PerByte));
}

CUtensorMap make_packed_operand_tensor_map(const Operand& op, int64_t rows, int64_t k, int box_rows, const char* name) {
  const int64_t bytes = ceil_div<int64_t>(k, kInt4PerByte);
  return encode_2d(CU_TENSOR_MAP_DATA_TYPE_UINT8, op.ptr, bytes, rows, row_stride_bytes(op, rows, bytes), 64, box_rows,
                   CU_TENSOR_MAP_L2_PROMOTION_L2_256B, name, CU_TENSOR_MAP_SWIZZLE_NONE);
}

bool tma_storable(const void* d, size_t element_bytes, int64_t m, int64_t ldd) {
  return reinterpret_cast<uintptr_t>(d) % 16 == 0 && (m == 1 || (ldd * static_cast<int64_t>(element_bytes)) % 16 == 0);
}

CUtensorMap make_output_tensor_map(void* d, OutType type, int64_t m, int64_t n, int64_t ldd, int box_rows,
                                   int box_cols) {
  CUtensorMapDataType tma_type = CU_TENSOR_MAP_DATA_TYPE_INT32;
  int64_t bytes = 4;
  switch (type) {
    case OutType::kInt32: break;
    case OutType::kFp32: tma_type = CU_TENSOR_MAP_DATA_TYPE_FLOAT32; break;
    case OutType::kBf16: tma_type = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16; bytes = 2; break;
    case OutType::kFp16: tma_type = CU_TENSOR_MAP_DATA_TYPE_FLOAT16; bytes = 2; break;
  }
  const int64_t stride = m == 1 ? round_up<int64_t>(n * bytes, 16) : ldd * bytes;  // one row: any legal stride
  return encode_2d(tma_type, d, n, m, stride, box_cols, box_rows, CU_TENSOR_MAP_L2_PROMOTION_NONE, nullptr);
}

}  // namespace tcgemm::sm90
