// FP4 (MXFP4 / NVFP4) weight-only GEMVs for decode in CUDA C++: single projections and the routed experts of a
// MoE layer, the same three modes as triton_kernel.py (built by cuda_kernel.py with torch's extension loader).
//
// Why CUDA cores and not the tensor cores: at decode a matrix row meets at most 8 token columns, and what limits
// the speed is how fast the packed weights stream in (0.53 / 0.56 bytes per weight), then how few instructions
// each weight costs once it is in a register. Each lane takes 16-byte pieces (32 weights, one MXFP4 scale block
// or two NVFP4 blocks) of R rows at once, so every load is a full 16-byte access, R rows share one read of x,
// and several loads are in flight per lane. A packed word of 8 codes becomes fp16 numbers e2m1 * 2^-14
// (e2m1_pairs, e2m1.cuh: 11 integer instructions; exact: code 1 is the fp16 subnormal 2^-15), then fp32 by the
// hardware conversion; the block's partial sum in fp32 is multiplied once by its scale (times 2^14). The warp sums
// its lanes with shuffles, so the result is deterministic (no atomics): a graph replay equals eager bit for bit.
// Launched on torch's current stream, so it records into CUDA graphs.
//
// Modes (rows of the output are tokens for mode 0, token-expert pairs for modes 1 and 2):
//   0: out[b, n] = x[b] . W[n]                                 (x dtype)
//   1: out[p, n] = wts[p] * swiglu(w1[e] x, w3[e] x)           (x dtype; clamp before SiLU when has_limit)
//   2: out[p, n] = w2[e] h[p]                                  (fp32)
// A program (blockIdx.x = p) of modes 1 and 2 computes pair p against its expert idx[p], read on the device:
// nothing is sorted and nothing is read back by the host.
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cooperative_groups.h>
#include <cstdint>

#include "e2m1.cuh"
#include "stream_load.cuh"
#include "pdl.cuh"

namespace {

namespace cg = cooperative_groups;
constexpr int WARPS = 4;          // warps per block; each warp owns R consecutive output rows
constexpr unsigned FULL = 0xffffffffu;

__device__ __forceinline__ void load8(const float* p, float (&o)[8]) {
  const float4 a = __ldg(reinterpret_cast<const float4*>(p)), b = __ldg(reinterpret_cast<const float4*>(p) + 1);
  o[0] = a.x; o[1] = a.y; o[2] = a.z; o[3] = a.w; o[4] = b.x; o[5] = b.y; o[6] = b.z; o[7] = b.w;
}

__device__ __forceinline__ void load8(const __nv_bfloat16* p, float (&o)[8]) {
  const uint4 u = __ldg(reinterpret_cast<const uint4*>(p));
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {                      // bf16 is the top half of an fp32
    o[2 * i] = __uint_as_float(w[i] << 16);
    o[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

__device__ __forceinline__ float2 half2_bits(uint32_t v) {
  __half2 h;
  *reinterpret_cast<uint32_t*>(&h) = v;
  return __half22float2(h);
}

// 8 e2m1 codes (byte i: element 2i low nibble, 2i+1 high) -> fp32 values * 2^-14, in element order: the fp16
// pairs (i, i + 4) of e2m1_pairs, then the hardware conversion.
__device__ __forceinline__ void e2m1x8(uint32_t v, float (&w)[8]) {
  uint32_t p[4];
  e2m1_pairs(v, p);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = half2_bits(p[i]);
    w[i] = f.x;
    w[i + 4] = f.y;
  }
}

// 8 e4m3 bytes (two words) -> fp32 values, in element order: the hardware pair conversion to fp16 (exact: every
// e4m3 value is an fp16 value), then fp32.
__device__ __forceinline__ void e4m3x8(uint32_t v0, uint32_t v1, float (&w)[8]) {
  const uint32_t v[2] = {v0, v1};
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const __half2_raw lo = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(v[i] & 0xffffu), __NV_E4M3);
    const __half2_raw hi = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(v[i] >> 16), __NV_E4M3);
    const float2 a = half2_bits(static_cast<uint32_t>(lo.x) | (static_cast<uint32_t>(lo.y) << 16));
    const float2 b = half2_bits(static_cast<uint32_t>(hi.x) | (static_cast<uint32_t>(hi.y) << 16));
    w[4 * i] = a.x; w[4 * i + 1] = a.y; w[4 * i + 2] = b.x; w[4 * i + 3] = b.y;
  }
}

// Formats: 0 MXFP4 (e2m1, e8m0 byte per 32), 1 NVFP4 (e2m1, e4m3 byte per 16, fp32 per matrix), 2 FP8 (e4m3,
// fp32 per 128x128 block). A 16-byte piece holds 32 FP4 or 16 FP8 elements: 4 or 2 octets of 8.
template <int FMT> struct Fmt {
  static constexpr int ELEMS = FMT == 2 ? 16 : 32;
  static constexpr int OCTETS = ELEMS / 8;
  static constexpr int SPLIT = FMT == 1 ? 2 : 1;       // scale blocks per piece
  static constexpr float UNDO = FMT == 2 ? 1.f : 16384.f;   // e2m1x8's 2^-14
};

template <int FMT>
__device__ __forceinline__ void octet(const uint4& q, int o, float (&w)[8]) {
  if constexpr (FMT == 2) {
    if (o == 0) e4m3x8(q.x, q.y, w); else e4m3x8(q.z, q.w, w);
  } else {
    e2m1x8(o == 0 ? q.x : o == 1 ? q.y : o == 2 ? q.z : q.w, w);
  }
}

// The scale(s) of piece c of `row` as loaded (an e8m0 byte, two e4m3 bytes, or fp32 bits; 0 past the row's end),
// fetched one piece ahead with the codes, so no load in the loop waits on memory. (It did not change the time at
// one token on the H200: that kernel is bound by instruction issue, ~5.5 per weight; BENCHMARKS.md.) s: bytes
// (FP4) or fp32 (FP8); sk: scales per row (FP4) or per 128-row band (FP8).
template <int FMT>
__device__ __forceinline__ uint32_t raw_scale(const uint8_t* __restrict__ s, int64_t row, int sk, int c, bool ok) {
  if (!ok) return 0u;
  if constexpr (FMT == 0) return __ldg(s + row * sk + c);
  else if constexpr (FMT == 1) return __ldg(reinterpret_cast<const uint16_t*>(s + row * sk) + c);
  else return __float_as_uint(__ldg(reinterpret_cast<const float*>(s) + (row / 128) * sk + (c * 16) / 128));
}

// raw_scale's value(s) times Fmt::UNDO: out[0] for the piece's first 16 elements, out[1] for the rest
template <int FMT>
__device__ __forceinline__ void piece_scales(uint32_t raw, float (&out)[2]) {
  if constexpr (FMT == 0) {
    out[0] = out[1] = __uint_as_float(raw << 23) * Fmt<0>::UNDO;
  } else if constexpr (FMT == 1) {
    __nv_fp8_e4m3 a, b;
    a.__x = raw & 0xff;
    b.__x = (raw >> 8) & 0xff;
    out[0] = static_cast<float>(a) * Fmt<1>::UNDO;
    out[1] = static_cast<float>(b) * Fmt<1>::UNDO;
  } else {
    out[0] = out[1] = __uint_as_float(raw);
  }
}

template <int A, int B, int C>
__device__ __forceinline__ void zero(float (&t)[A][B][C]) {
#pragma unroll
  for (int i = 0; i < A; ++i)
#pragma unroll
    for (int j = 0; j < B; ++j)
#pragma unroll
      for (int k = 0; k < C; ++k) t[i][j][k] = 0.f;
}

__device__ __forceinline__ float round_bf16(float v) { return __bfloat162float(__float2bfloat16(v)); }
__device__ __forceinline__ void store(float* p, float v) { *p = v; }
__device__ __forceinline__ void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16(v); }

// NM matrices (1, or 2 for w1 and w3, which share each read of x), rows [row0, row0 + R) of each, against the
// token rows xrow[0..nb): acc[m][r][b]. Each lane streams pieces c = lane, lane + 32, ...; the next piece's
// weights are loaded before the current one is computed, so loads stay in flight during the arithmetic.
template <int FMT, int NM, int R, int MAXT, typename XT>
__device__ __forceinline__ void rows_dot(const uint8_t* const (&w)[NM], const uint8_t* const (&s)[NM],
                                         const XT* __restrict__ x, const int64_t (&xrow)[MAXT], int nb, int row0,
                                         int N, int K, int lane, float (&acc)[NM][R][MAXT]) {
  using F = Fmt<FMT>;
  const int pieces = K / F::ELEMS;
  const int64_t stride = FMT == 2 ? K : K / 2;                       // bytes per row
  const int sk = FMT == 0 ? K / 32 : FMT == 1 ? K / 16 : (K + 127) / 128;
  uint4 q[NM][R];
  uint32_t qs[NM][R];
  auto fetch = [&](int c, uint4 (&dst)[NM][R], uint32_t (&dsts)[NM][R]) {
#pragma unroll
    for (int m = 0; m < NM; ++m)
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const bool ok = row0 + r < N && c < pieces;
        dst[m][r] = ok ? ld_stream(reinterpret_cast<const uint4*>(w[m] + static_cast<int64_t>(row0 + r) * stride) + c)
                       : make_uint4(0, 0, 0, 0);
        dsts[m][r] = raw_scale<FMT>(s[m], row0 + r, sk, c, ok);
      }
  };
  fetch(lane, q, qs);
  for (int c = lane; c < pieces; c += 32) {
    uint4 next[NM][R];
    uint32_t nexts[NM][R];
    fetch(c + 32, next, nexts);
    float sc[NM][R][2];
#pragma unroll
    for (int m = 0; m < NM; ++m)
#pragma unroll
      for (int r = 0; r < R; ++r) piece_scales<FMT>(qs[m][r], sc[m][r]);     // rows past N: codes and scales 0
    float blk[NM][R][MAXT];
    zero(blk);
#pragma unroll
    for (int o = 0; o < F::OCTETS; ++o) {
      float wf[NM][R][8];
#pragma unroll
      for (int m = 0; m < NM; ++m)
#pragma unroll
        for (int r = 0; r < R; ++r) octet<FMT>(q[m][r], o, wf[m][r]);
#pragma unroll
      for (int b = 0; b < MAXT; ++b) {
        if (b < nb) {
          float xv[8];
          load8(x + xrow[b] * K + c * F::ELEMS + o * 8, xv);
#pragma unroll
          for (int m = 0; m < NM; ++m)
#pragma unroll
            for (int r = 0; r < R; ++r)
#pragma unroll
              for (int i = 0; i < 8; ++i) blk[m][r][b] = fmaf(wf[m][r][i], xv[i], blk[m][r][b]);
        }
      }
      if (F::SPLIT == 2 && o == F::OCTETS / 2 - 1) {   // NVFP4: the first 16 elements are a block of their own
#pragma unroll
        for (int m = 0; m < NM; ++m)
#pragma unroll
          for (int r = 0; r < R; ++r)
#pragma unroll
            for (int b = 0; b < MAXT; ++b) {
              acc[m][r][b] = fmaf(blk[m][r][b], sc[m][r][0], acc[m][r][b]);
              blk[m][r][b] = 0.f;
            }
      }
    }
#pragma unroll
    for (int m = 0; m < NM; ++m)
#pragma unroll
      for (int r = 0; r < R; ++r) {
#pragma unroll
        for (int b = 0; b < MAXT; ++b) acc[m][r][b] = fmaf(blk[m][r][b], sc[m][r][1], acc[m][r][b]);
        q[m][r] = next[m][r];
        qs[m][r] = nexts[m][r];
      }
  }
}

template <int NM, int R, int MAXT>
__device__ __forceinline__ void warp_sum(float (&acc)[NM][R][MAXT], int nb) {
#pragma unroll
  for (int m = 0; m < NM; ++m)
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int b = 0; b < MAXT; ++b)
        if (b < nb)
#pragma unroll
          for (int o = 16; o > 0; o >>= 1) acc[m][r][b] += __shfl_xor_sync(FULL, acc[m][r][b], o);
}

// Which rows of x this program computes, member[b] for b < nb. Mode 0: tokens p*MAXT .. p*MAXT + MAXT - 1.
// Modes 1, 2: pair p alone (MAXT 1), with its expert e. An expert that several tokens of a decode batch chose is
// streamed once per pair; with 256 experts that is rare, and one token column per program keeps 4 rows of each
// matrix in flight per lane where 8 columns' accumulators would leave room for 1.
template <int MODE, int MAXT>
__device__ __forceinline__ int members(const int64_t* __restrict__ idx, int p, int P, int64_t& e,
                                       int (&member)[MAXT]) {
  if constexpr (MODE == 0) {
    e = 0;
#pragma unroll
    for (int b = 0; b < MAXT; ++b) member[b] = p * MAXT + b;
    return min(MAXT, P - p * MAXT);
  } else {
    static_assert(MAXT == 1, "expert modes carry one pair per program");
    e = __ldg(idx + p);
    member[0] = p;
    return 1;
  }
}

template <int FMT, int MODE, int R, int MAXT, typename XT, typename OT>
__global__ void __launch_bounds__(WARPS * 32)
fp4_rows_kernel(const XT* __restrict__ x, const int64_t* __restrict__ idx, const float* __restrict__ wts,
                OT* __restrict__ out, const uint8_t* __restrict__ wa, const uint8_t* __restrict__ sa,
                const float* __restrict__ ga, const uint8_t* __restrict__ wb, const uint8_t* __restrict__ sb,
                const float* __restrict__ gb, int P, int xdiv, int N, int K, float limit, bool has_limit,
                bool round, bool pf) {
  // a gemv (mode 0) streams the block's WARPS * R rows of its one matrix, a slab; the experts read idx first
  pdl_enter(pf && MODE == 0, wa + static_cast<int64_t>(blockIdx.y) * WARPS * R * (FMT == 2 ? K : K / 2), 1, 0,
            static_cast<int64_t>(max(0, min(WARPS * R, N - static_cast<int>(blockIdx.y) * WARPS * R))) *
                (FMT == 2 ? K : K / 2));
  constexpr int NM = MODE == 1 ? 2 : 1;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int p = blockIdx.x;
  int64_t e;
  int member[MAXT];
  const int nb = members<MODE, MAXT>(idx, p, P, e, member);
  int64_t xrow[MAXT];
#pragma unroll
  for (int b = 0; b < MAXT; ++b) xrow[b] = b < nb ? member[b] / xdiv : 0;
  const int row0 = (blockIdx.y * WARPS + warp) * R;
  if (row0 >= N) return;
  // a stack of experts: expert e's codes and scales (modes 1, 2); FP8 (mode 0 only) is one matrix
  const int64_t wsize = static_cast<int64_t>(N) * (FMT == 2 ? K : K / 2);
  const int64_t ssize = static_cast<int64_t>(N) * (FMT == 0 ? K / 32 : K / 16);
  const uint8_t* wp[NM];
  const uint8_t* sp[NM];
  wp[0] = wa + e * wsize;
  sp[0] = sa + e * ssize;
  if constexpr (NM == 2) {
    wp[NM - 1] = wb + e * wsize;
    sp[NM - 1] = sb + e * ssize;
  }
  float acc[NM][R][MAXT];
  zero(acc);
  rows_dot<FMT, NM, R, MAXT, XT>(wp, sp, x, xrow, nb, row0, N, K, lane, acc);
  warp_sum<NM, R, MAXT>(acc, nb);
  if (lane != 0) return;
  const float gsa = FMT == 1 ? __ldg(ga + e) : 1.f;
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int b = 0; b < MAXT; ++b) {
      if (b < nb && row0 + r < N) {
        float v = acc[0][r][b] * gsa;
        if (round) v = round_bf16(v);                 // each projection's output in bf16, as the reference
        if constexpr (MODE == 1) {
          float u = acc[NM - 1][r][b] * (FMT == 1 ? __ldg(gb + e) : 1.f);
          if (round) u = round_bf16(u);
          if (has_limit) { v = fminf(v, limit); u = fminf(fmaxf(u, -limit), limit); }   // clamp, then SiLU
          v = v / (1.f + expf(-v)) * u * __ldg(wts + member[b]);
        }
        store(out + static_cast<int64_t>(member[b]) * N + row0 + r, v);
      }
    }
}

template <int FMT, int MODE, int MAXT, int R, typename XT, typename OT>
void launch(const torch::Tensor& x, const torch::Tensor& idx, const torch::Tensor& wts, torch::Tensor& out,
            const torch::Tensor& wa, const torch::Tensor& sa, const torch::Tensor& ga, const torch::Tensor& wb,
            const torch::Tensor& sb, const torch::Tensor& gb, int P, int xdiv, int N, int K, float limit,
            bool has_limit, bool round) {
  const dim3 grid(MODE == 0 ? (P + MAXT - 1) / MAXT : P, (N + WARPS * R - 1) / (WARPS * R));
  pdl_launch(fp4_rows_kernel<FMT, MODE, R, MAXT, XT, OT>, grid, dim3(WARPS * 32), 0, at::cuda::getCurrentCUDAStream(),
      nullptr, 0, reinterpret_cast<const XT*>(x.data_ptr()), idx.data_ptr<int64_t>(), wts.data_ptr<float>(),
      reinterpret_cast<OT*>(out.data_ptr()), wa.data_ptr<uint8_t>(), static_cast<const uint8_t*>(sa.data_ptr()),
      ga.data_ptr<float>(), wb.data_ptr<uint8_t>(), static_cast<const uint8_t*>(sb.data_ptr()), gb.data_ptr<float>(),
      P, xdiv, N, K, limit, has_limit, round, pdl_prefetch());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// rows per warp (R): 4 weight rows per matrix (8 pieces in flight per lane with the prefetch), 2 when the 8 token
// columns' accumulators need the registers (8 rows at one token measured 4-25% slower: fewer warps per SM)
template <int FMT, int MODE, int MAXT, int R>
void by_dtype(const torch::Tensor& x, const torch::Tensor& idx, const torch::Tensor& wts, torch::Tensor& out,
              const torch::Tensor& wa, const torch::Tensor& sa, const torch::Tensor& ga, const torch::Tensor& wb,
              const torch::Tensor& sb, const torch::Tensor& gb, int P, int xdiv, int N, int K, float limit,
              bool has_limit, bool round) {
  const bool bf = x.scalar_type() == at::kBFloat16;
  if constexpr (MODE == 2) {
    if (bf) launch<FMT, MODE, MAXT, R, __nv_bfloat16, float>(x, idx, wts, out, wa, sa, ga, wb, sb, gb, P, xdiv, N, K, limit, has_limit, round);
    else launch<FMT, MODE, MAXT, R, float, float>(x, idx, wts, out, wa, sa, ga, wb, sb, gb, P, xdiv, N, K, limit, has_limit, round);
  } else {
    if (bf) launch<FMT, MODE, MAXT, R, __nv_bfloat16, __nv_bfloat16>(x, idx, wts, out, wa, sa, ga, wb, sb, gb, P, xdiv, N, K, limit, has_limit, round);
    else launch<FMT, MODE, MAXT, R, float, float>(x, idx, wts, out, wa, sa, ga, wb, sb, gb, P, xdiv, N, K, limit, has_limit, round);
  }
}

template <int FMT, int MODE>
void by_width(int maxt, const torch::Tensor& x, const torch::Tensor& idx, const torch::Tensor& wts,
              torch::Tensor& out, const torch::Tensor& wa, const torch::Tensor& sa, const torch::Tensor& ga,
              const torch::Tensor& wb, const torch::Tensor& sb, const torch::Tensor& gb, int P, int xdiv, int N,
              int K, float limit, bool has_limit, bool round) {
  if (maxt == 1) by_dtype<FMT, MODE, 1, 4>(x, idx, wts, out, wa, sa, ga, wb, sb, gb, P, xdiv, N, K, limit, has_limit, round);
  else if constexpr (MODE == 0) by_dtype<FMT, MODE, 8, 2>(x, idx, wts, out, wa, sa, ga, wb, sb, gb, P, xdiv, N, K, limit, has_limit, round);
}

// fp32 weights against 1..8 fp32 (or bf16, widened exactly) token rows: out[b, n] = x[b] . W[n] (the LM head, the compressor's projections,
// the mHC mixes and the router, all of which the reference computes in fp32). The same streaming as the FP4 rows
// kernel: each lane takes 16-byte pieces of R = 4 rows, the next piece in flight while the current one is
// multiplied, the 4 rows sharing each read of x (from L1: the weights bypass it), a shuffle sum per row. cuBLAS's
// choices for 8 rows ran at half the copy bandwidth or less on the H200 (0.95 ms for the Flash head against a
// 0.53 ms floor; 3-20 us for the narrow matrices). Two shapes of the same loop:
// - f32_rows_kernel: a warp owns 4 rows and all of K (the LM head: 129,280 rows fill the GPU);
// - f32_cluster_kernel: a cluster of blocks owns 4 rows, each block a slice of K, each of its SPLIT_WARPS warps
//   interleaved pieces of the slice; warps are summed through shared memory, blocks through the cluster's
//   distributed shared memory, both in a fixed order (deterministic, one launch, no atomics). A narrow matrix (fewer
//   than 16,384 rows) has too few rows to fill the GPU; one block per row instead read x 8x over per weight byte and ran
//   the mHC mix (24 x 16384) at 22 us for 8 rows, against cuBLAS's 12.5 (H200, 2026-12-04 run 19).
constexpr int SPLIT_WARPS = 8;
constexpr int MAX_CLUSTER = 8;    // the portable cluster size

// four consecutive x values from piece c of row b as fp32: fp32 x read as it is, bf16 x (the residual stream the mHC
// mixes and the router read) widened here, exactly, where the caller used to make an fp32 copy in a launch of its own
__device__ __forceinline__ float4 x_piece(const float* __restrict__ x, int64_t row, int c) {
  return __ldg(reinterpret_cast<const float4*>(x + row) + c);
}
__device__ __forceinline__ float4 x_piece(const __nv_bfloat16* __restrict__ x, int64_t row, int c) {
  const uint2 u = __ldg(reinterpret_cast<const uint2*>(x + row) + c);
  const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.x));
  const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.y));
  return make_float4(a.x, a.y, b.x, b.y);
}

template <int MAXT, int R, int STEP, bool XBATCH, typename XT>
__device__ __forceinline__ void f32_dot(const XT* __restrict__ x, const float* __restrict__ w, int nb, int N, int K,
                                        int end, int row0, int c, float (&acc)[1][R][MAXT]) {
  auto fetch = [&](int c, float4 (&dst)[R]) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const uint4 u = row0 + r < N && c < end
                          ? ld_stream(reinterpret_cast<const float4*>(w + static_cast<int64_t>(row0 + r) * K) + c)
                          : make_uint4(0, 0, 0, 0);
      dst[r] = make_float4(__uint_as_float(u.x), __uint_as_float(u.y), __uint_as_float(u.z), __uint_as_float(u.w));
    }
  };
  auto fma4 = [&](const float4& xv, int b, const float4 (&q)[R]) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      acc[0][r][b] = fmaf(q[r].x, xv.x, acc[0][r][b]);
      acc[0][r][b] = fmaf(q[r].y, xv.y, acc[0][r][b]);
      acc[0][r][b] = fmaf(q[r].z, xv.z, acc[0][r][b]);
      acc[0][r][b] = fmaf(q[r].w, xv.w, acc[0][r][b]);
    }
  };
  float4 q[R];
  fetch(c, q);
  for (; c < end; c += STEP) {
    float4 next[R];
    fetch(c + STEP, next);
    if constexpr (XBATCH) {          // every row of x in one round trip: a split's few pieces cannot hide nb of them
      float4 xv[MAXT];
#pragma unroll
      for (int b = 0; b < MAXT; ++b)
        xv[b] = b < nb ? x_piece(x, static_cast<int64_t>(b) * K, c) : make_float4(0, 0, 0, 0);
#pragma unroll
      for (int b = 0; b < MAXT; ++b) fma4(xv[b], b, q);
    } else {                         // fewer registers: the head's occupancy (89 % of copy bandwidth batched, 94 % not)
#pragma unroll
      for (int b = 0; b < MAXT; ++b)
        if (b < nb) fma4(x_piece(x, static_cast<int64_t>(b) * K, c), b, q);
    }
#pragma unroll
    for (int r = 0; r < R; ++r) q[r] = next[r];
  }
  warp_sum<1, R, MAXT>(acc, nb);
}

template <int MAXT, typename XT>
__global__ void __launch_bounds__(WARPS * 32)
f32_rows_kernel(const XT* __restrict__ x, const float* __restrict__ w, float* __restrict__ out, int nb, int N, int K,
                bool pf) {
  pdl_enter(pf, w + static_cast<int64_t>(blockIdx.x) * WARPS * 4 * K, 1, 0,     // the block's rows: one slab
            static_cast<int64_t>(max(0, min(WARPS * 4, N - static_cast<int>(blockIdx.x) * WARPS * 4))) * K * 4);
  constexpr int R = 4;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int row0 = (blockIdx.x * WARPS + warp) * R;
  if (row0 >= N) return;
  float acc[1][R][MAXT];                               // [1]: the shape zero() and warp_sum() take (one matrix)
  zero(acc);
  f32_dot<MAXT, R, 32, false, XT>(x, w, nb, N, K, K / 4, row0, lane, acc);
  // lane (r * MAXT + b) stores (row0 + r, b): the stores spread over the warp
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int b = 0; b < MAXT; ++b)
      if (lane == r * MAXT + b && b < nb && row0 + r < N) out[static_cast<int64_t>(b) * N + row0 + r] = acc[0][r][b];
}

// blockIdx.x: the block's slice of K (its rank in the cluster of gridDim.x blocks), blockIdx.y: the 4-row tile
template <int MAXT, typename XT>
__global__ void __launch_bounds__(SPLIT_WARPS * 32)
f32_cluster_kernel(const XT* __restrict__ x, const float* __restrict__ w, float* __restrict__ out, int nb, int N,
                   int K, int slice, bool pf) {
  // the block's slice of K in each of its 4 rows
  pdl_enter(pf, w + static_cast<int64_t>(blockIdx.y) * 4 * K + static_cast<int64_t>(blockIdx.x) * slice * 4,
            max(0, min(4, N - static_cast<int>(blockIdx.y) * 4)), static_cast<int64_t>(K) * 4,
            static_cast<int64_t>(max(0, min(slice * 4, K - static_cast<int>(blockIdx.x) * slice * 4))) * 4);
  constexpr int R = 4;
  __shared__ float part[SPLIT_WARPS][R * MAXT];
  __shared__ float block_sum[R * MAXT];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int row0 = blockIdx.y * R, first = blockIdx.x * slice;
  float acc[1][R][MAXT];
  zero(acc);
  f32_dot<MAXT, R, SPLIT_WARPS * 32, true, XT>(x, w, nb, N, K, min(K / 4, first + slice), row0, first + warp * 32 + lane, acc);
  if (lane == 0)
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int b = 0; b < MAXT; ++b) part[warp][r * MAXT + b] = acc[0][r][b];
  __syncthreads();
  const int t = threadIdx.x;
  if (t < R * MAXT) {
    float s = part[0][t];
#pragma unroll
    for (int k = 1; k < SPLIT_WARPS; ++k) s += part[k][t];
    block_sum[t] = s;
  }
  const bool store = t < R * MAXT && t % MAXT < nb && row0 + t / MAXT < N;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();                                      // every block's sum is in its shared memory
  if (cluster.block_rank() == 0 && store) {
    float s = 0.f;
    for (unsigned k = 0; k < cluster.num_blocks(); ++k) s += cluster.map_shared_rank(block_sum, k)[t];
    out[static_cast<int64_t>(t % MAXT) * N + row0 + t / MAXT] = s;
  }
  cluster.sync();                                      // no block leaves while rank 0 reads its shared memory
#else
  // compiled without clusters: the host launches one block per 4 rows (f32_clusters() is false), never more
  if (gridDim.x != 1) __trap();
  if (store) out[static_cast<int64_t>(t % MAXT) * N + row0 + t / MAXT] = block_sum[t];
#endif
}

}  // namespace

// The checks that keep a launch inside its buffers. The Python wrapper (cuda_kernel.py `_rows`) makes the same
// checks first and raises ValueError: on the H200 image a failed TORCH_CHECK here ended the process with a
// segmentation fault instead of reaching Python as an error.
void fp4_rows(const torch::Tensor& x, const torch::Tensor& idx, const torch::Tensor& wts, torch::Tensor out,
              const torch::Tensor& wa, const torch::Tensor& sa, const torch::Tensor& ga, const torch::Tensor& wb,
              const torch::Tensor& sb, const torch::Tensor& gb, int64_t P, int64_t xdiv, int64_t N, int64_t K,
              double limit, bool has_limit, int64_t fmt, int64_t mode, bool round, int64_t maxt, int64_t pdl) {
  const PdlScope launches(pdl);
  TORCH_CHECK(x.is_cuda() && x.is_contiguous(), "fp4_rows: x must be a contiguous CUDA tensor");
  TORCH_CHECK(x.scalar_type() == at::kBFloat16 || x.scalar_type() == at::kFloat, "fp4_rows: x must be bf16 or fp32, found ", x.scalar_type());
  TORCH_CHECK(K % (fmt == 2 ? 16 : 32) == 0, "fp4_rows: K must be a multiple of 32 (16 for FP8), found ", K);
  TORCH_CHECK(idx.scalar_type() == at::kLong && wts.scalar_type() == at::kFloat, "fp4_rows: idx int64 and wts fp32 expected");
  for (const auto* t : {&wa, &wb})
    TORCH_CHECK(t->scalar_type() == at::kByte && t->is_contiguous(), "fp4_rows: packed data must be contiguous uint8");
  for (const auto* t : {&sa, &sb})
    TORCH_CHECK(t->scalar_type() == (fmt == 2 ? at::kFloat : at::kByte) && t->is_contiguous(),
                "fp4_rows: scales must be contiguous ", fmt == 2 ? "fp32" : "uint8");
  TORCH_CHECK(reinterpret_cast<uintptr_t>(wa.data_ptr()) % 16 == 0 && reinterpret_cast<uintptr_t>(wb.data_ptr()) % 16 == 0,
              "fp4_rows: packed data must be 16-byte aligned");
  TORCH_CHECK(mode >= 0 && mode <= 2 && fmt >= 0 && fmt <= 2 && (fmt < 2 || mode == 0) && (maxt == 1 || (maxt == 8 && mode == 0)),
              "fp4_rows: bad mode ", mode, " / format ", fmt, " / width ", maxt);
  if (P == 0 || N == 0) return;
  const float lim = static_cast<float>(limit);
  const int p = static_cast<int>(P), xd = static_cast<int>(xdiv), n = static_cast<int>(N), k = static_cast<int>(K);
#define FP4_ROWS_CASE(F, M) if (fmt == F && mode == M) by_width<F, M>(static_cast<int>(maxt), x, idx, wts, out, wa, sa, ga, wb, sb, gb, p, xd, n, k, lim, has_limit, round)
  FP4_ROWS_CASE(0, 0); FP4_ROWS_CASE(0, 1); FP4_ROWS_CASE(0, 2);
  FP4_ROWS_CASE(1, 0); FP4_ROWS_CASE(1, 1); FP4_ROWS_CASE(1, 2);
  FP4_ROWS_CASE(2, 0);
#undef FP4_ROWS_CASE
}

// y[B, N] = x[B, K] W[N, K]^T in fp32 for 1..8 rows (the Python wrapper `f32_gemv_cuda` checks first)
// Whether the cluster kernel runs with clusters here: its code was compiled for sm_90 or newer (not JIT-compiled from
// older PTX, which holds only the one-block path) and the current device is sm_90 or newer.
bool f32_clusters() {
  static signed char known[256] = {};                 // per device: 0 not asked yet, 1 no, 2 yes
  const int dev = c10::cuda::current_device();
  TORCH_CHECK(dev >= 0 && dev < 256, "f32_rows: device index ", dev, " out of range");
  if (!known[dev]) {
    cudaFuncAttributes a;
    C10_CUDA_CHECK(cudaFuncGetAttributes(&a, f32_cluster_kernel<1, float>));
    known[dev] = a.ptxVersion >= 90 && at::cuda::getCurrentDeviceProperties()->major >= 9 ? 2 : 1;
  }
  return known[dev] == 2;
}

template <int MAXT, typename XT>
void f32_launch(const XT* xp, const float* wp, float* op, int nb, int N, int K, int cluster, cudaStream_t stream) {
  if (cluster == 0) {
    pdl_launch(f32_rows_kernel<MAXT, XT>, dim3((N + WARPS * 4 - 1) / (WARPS * 4)), dim3(WARPS * 32), 0, stream, nullptr, 0,
               xp, wp, op, nb, N, K, pdl_prefetch());
    return;
  }
  const int pieces = K / 4, slice = (pieces + cluster - 1) / cluster;
  const bool clusters = f32_clusters();
  TORCH_CHECK(cluster == 1 || clusters, "f32_rows: a cluster of ", cluster, " blocks needs the kernel built for sm_90 or "
              "newer and such a device (f32_clusters() is false here)");
  TORCH_CHECK((N + 3) / 4 <= 65535, "f32_rows: ", N, " rows are more than 65535 blocks of 4 (take the rows kernel, cluster 0)");
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = cluster;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  // without clusters: the kernel's one-block path
  pdl_launch(f32_cluster_kernel<MAXT, XT>, dim3(cluster, (N + 3) / 4, 1), dim3(SPLIT_WARPS * 32), 0, stream, attr,
             clusters ? 1 : 0, xp, wp, op, nb, N, K, slice, pdl_prefetch());
}

template <typename XT>
void f32_dispatch(const XT* xp, const float* wp, float* op, int nb, int N, int K, int cl, cudaStream_t stream) {
  if (nb == 1) f32_launch<1>(xp, wp, op, nb, N, K, cl, stream);
  else if (nb <= 2) f32_launch<2>(xp, wp, op, nb, N, K, cl, stream);
  else if (nb <= 4) f32_launch<4>(xp, wp, op, nb, N, K, cl, stream);
  else f32_launch<8>(xp, wp, op, nb, N, K, cl, stream);
}

void f32_rows(const torch::Tensor& x, const torch::Tensor& w, torch::Tensor out, int64_t cluster, int64_t pdl) {
  const PdlScope launches(pdl);
  const bool bf = x.scalar_type() == at::kBFloat16;
  TORCH_CHECK(x.is_cuda() && x.is_contiguous() && (x.scalar_type() == at::kFloat || bf) && x.dim() == 2 && x.size(0) >= 1 &&
              x.size(0) <= 8, "f32_rows: x must be contiguous fp32 or bf16 [1..8, K] on CUDA");
  TORCH_CHECK(w.is_contiguous() && w.scalar_type() == at::kFloat && w.dim() == 2 && w.size(1) == x.size(1) && x.size(1) % 4 == 0 &&
              reinterpret_cast<uintptr_t>(w.data_ptr()) % 16 == 0 && reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0,
              "f32_rows: w must be contiguous 16-byte-aligned fp32 [N, K], K a multiple of 4");
  TORCH_CHECK(out.is_contiguous() && out.scalar_type() == at::kFloat && out.size(0) == x.size(0) && out.size(1) == w.size(0),
              "f32_rows: out must be contiguous fp32 [B, N]");
  TORCH_CHECK(cluster >= 0 && cluster <= MAX_CLUSTER,
              "f32_rows: cluster must be 0 (rows kernel) or 1..", MAX_CLUSTER, " blocks splitting K, found ", cluster);
  const int nb = static_cast<int>(x.size(0)), N = static_cast<int>(w.size(0)), K = static_cast<int>(x.size(1));
  if (N == 0) return;
  const c10::cuda::CUDAGuard guard(x.device());
  const auto stream = at::cuda::getCurrentCUDAStream();
  const float* wp = w.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const int cl = static_cast<int>(cluster);
  if (bf)
    f32_dispatch(reinterpret_cast<const __nv_bfloat16*>(x.data_ptr<at::BFloat16>()), wp, op, nb, N, K, cl, stream);
  else
    f32_dispatch(x.data_ptr<float>(), wp, op, nb, N, K, cl, stream);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// mma_kernel.cu: the tensor-core GEMV for bf16 decode rows
void mma_gemv(const torch::Tensor& x, torch::Tensor out, const torch::Tensor& w, const torch::Tensor& s,
              const torch::Tensor& g, int64_t fmt, int64_t ks, int64_t pdl);
void mma_experts(const torch::Tensor& x, const torch::Tensor& idx, const torch::Tensor& wts, torch::Tensor out,
                 const torch::Tensor& wa, const torch::Tensor& sa, const torch::Tensor& ga, const torch::Tensor& wb,
                 const torch::Tensor& sb, const torch::Tensor& gb, int64_t P, int64_t xdiv, int64_t N, int64_t K,
                 double limit, bool has_limit, int64_t fmt, int64_t mode, bool pairs_first, int64_t pdl);

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("fp4_rows", &fp4_rows, "FP4/FP8 weight-only rows kernel (modes: 0 gemv, 1 expert up + SwiGLU, 2 expert down)");
  m.def("f32_clusters", &f32_clusters, "whether the fp32 cluster kernel runs with thread-block clusters on the current device");
  m.def("f32_rows", &f32_rows, "fp32 weights against 1..8 fp32 rows (cluster 0: rows kernel; 1..8: blocks of a cluster splitting K)");
  m.def("mma_gemv", &mma_gemv, "FP4/FP8 weight-only GEMV on the tensor cores for bf16 x of 1..8 rows");
  m.def("mma_experts", &mma_experts, "FP4 routed experts on the tensor cores for bf16 x (modes 1 and 2)");
}
