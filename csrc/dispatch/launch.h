// The launch table: (backend, epilogue) -> the family's plan and launcher.
#pragma once

#include <cstdint>

#include "common/problem.h"
#include "common/quantize_params.h"
#include "dispatch/backends.h"
#include "epilogue/epilogues.h"

namespace tcgemm {

// Launches the GEMM on p.stream with a resolved GPU backend. p.k may be 0 for the int32
// epilogue (D = epilogue(0)). The caller has validated shapes, layouts and offsets.
void run_gpu(Backend b, const GemmProblem& p, const EpilogueArgs& epilogue, const DeviceInfo& dev);

// Whether resolved GPU backend b runs an M x N x K GEMM on the skinny kernel (its own route, or
// the few-rows route of sm80 / sm90).
// b_int4: B is packed 4-bit (plan.h use_skinny).
bool runs_on_skinny(Backend b, int m, int n, int k, const DeviceInfo& dev, bool b_int4 = false);

// Whether resolved GPU backend b runs one row of A against int8 B `weight` (N x K) on the GEMV
// (kernels/gemv/gemv_int8.h): the sm90 backend where plan.h's use_gemv takes the shape, B fits
// the kernel, and no per-block scales (per_block). A must then be int8 in memory, so callers that
// would quantize A inside the skinny kernel quantize it first (ops: gemm_quantizes_a).
bool runs_on_gemv(Backend b, int m, int n, int k, const Operand& weight, bool b_int4, bool per_block);

// Whether resolved GPU backend b computes p with its packed 4-bit B (p.b_int4) as it is: the W4
// kernel where it takes p (a_w4_order); the skinny kernel on its route, B's rows as it loads them;
// off that route, the sm90 kernel (an Int4 config) where plan.h's use_sm90_int4 takes the shape,
// the sums run over all of K (not per_block: the epilogue promotes no K blocks) and TMA can
// describe A and the packed B.
// Otherwise the binding layer unpacks B into int8 first (kernels/int4/unpack_int4.h) and every
// backend runs the int8 weight.
bool reads_packed_b(Backend b, const GemmProblem& p, const DeviceInfo& dev, bool per_block);

// The W4 kernel's configs' blocks the current device runs at once, per K split (plan.h W4Residency);
// for a device whose sm90 kernels run (DeviceInfo::w4_resident, read once per device).
W4Residency w4_residency();

// Whether resolved GPU backend b computes an M x N x K GEMM with packed 4-bit B `b` on the W4
// kernel (kernels/sm90/sm90_w4.h; plan.h plan_sm90_w4): the sm90 backend, a plan for the shape
// (per_block: fp32 scales per K block, promoted, at up to 64 rows), K a multiple of 128 and B's
// bytes TMA-describable. A must then be given in the kernel's K order (a_w4_order).
bool runs_on_w4(Backend b, int m, int n, int k, const Operand& packed_b, const DeviceInfo& dev, bool per_block);
// Whether p (a packed B, a signed A) runs on the W4 kernel: the binding layer then writes A in its
// K order (GemmProblem::a_w4_order). Not int8 group scales with per_block scales.
bool a_w4_order(Backend b, const GemmProblem& p, const DeviceInfo& dev, bool per_block);

// Whether resolved GPU backend b, where it does not read p's packed 4-bit B as it is
// (reads_packed_b), unpacks it inside the GEMM instead of after a separate pass: the sm90 kernel
// off the skinny route, the sums over all of K (not per_block), and rows it can load 16 bytes at a
// time (kernels/sm90/sm90_unpack_ahead.h). The caller then gives p.b_unpack, and p.b the int8
// buffer the kernel fills.
bool unpacks_in_gemm(Backend b, const GemmProblem& p, const DeviceInfo& dev, bool per_block);
// The bytes between rows of p's packed B (a single row's stride is free: K / 2 then).
int64_t packed_b_row_stride(const GemmProblem& p);

// The blocks of a cluster that share each tile's K for a packed 4-bit B on the skinny kernel
// (GemmProblem::cluster_k_split): plan.h's plan_skinny_int4_split where the device and this
// build's kernels have clusters (the skinny kernels carry sm_90a code wherever the sm90 ones do),
// else 1; also 1 where per-block scales are promoted in fp32 (per_block): their sums then keep
// the order of the unpacked int8 weight's kernel, so that the two give the same bits.
int skinny_int4_split(int m, int n, int k, const DeviceInfo& dev, bool per_block);

// The scaled GEMM p (a symmetric epilogue, D of x's dtype) on the skinny kernel, which quantizes
// A from the float rows xq describes itself (skinny::quantizes_in_kernel(xq)); p.a is not read.
void run_skinny_quantizing(const GemmProblem& p, const ScaledEpilogueParams& e, const QuantizeParams& xq,
                           const DeviceInfo& dev);

// The plain C++ path for rows [m_begin, m_end) of D; both operands K-major. The scaled epilogue
// writes fp32 (p.d.type == kFp32), which the caller rounds to the output dtype.
void run_cpu(const GemmProblem& p, const EpilogueArgs& epilogue, int64_t m_begin, int64_t m_end);

}  // namespace tcgemm
