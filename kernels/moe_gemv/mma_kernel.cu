// Decode GEMV on the tensor cores: y[b, n] = x[b] . W[n] for bf16 x with up to 8 token rows and W stored as
// MXFP4, NVFP4 or FP8 (e4m3, 128x128 fp32 block scales), and the routed experts of a decode batch (FP4, one
// token per token-expert pair). Built into the same extension as cuda_kernel.cu.
//
// Why the tensor cores when Hopper has no FP4 ones: the CUDA-core kernel (cuda_kernel.cu) spends about four
// instructions per weight (decode, fp16 -> fp32, FMA) and stalls on them at half the copy bandwidth. Here the
// multiply-add and the conversion to fp32 go to mma.sync m16n8k16 (fp16 in, fp32 accumulate), so a weight costs
// its decode (11 integer instructions per 8 codes, e2m1.cuh) and 8 token columns cost what one does.
//
// Numbers, exactly:
//  - an e2m1 code is placed in fp16 bits as e2m1 * 2^-14 (code 1 is the subnormal 2^-15; the tensor cores and
//    HMUL2 keep fp16 subnormals); an e4m3 byte converts to fp16 exactly;
//  - MXFP4: a 32-element block is one thread's packed word in each of 4 threads, so an mma never mixes blocks;
//    the two mmas of a block accumulate from zero and are scaled by the e8m0 scale in fp32;
//  - NVFP4: the 16-element blocks of a word differ across the 4 threads of an mma, so each decoded pair is
//    multiplied by its block's e4m3 scale * 2^7 in fp16 first (exact: the product has at most 6 significant bits
//    and lies in [2^-17, 21]); 2^-7 and the per-matrix scale come back in fp32 at the end;
//  - FP8: a 16-byte load per thread, 4 threads = 64 elements inside one 128x128 scale block; 8 mmas per block
//    accumulate from zero and are scaled in fp32;
//  - one token (fp4_dot1): the mma columns keep the scale blocks apart instead of tokens, so every (half-)block's
//    partial sum leaves the mma on its own and is scaled in fp32 (MXFP4 and NVFP4 alike; no fp16 scaling);
//  - x is brought into fp16 range per token (per warp's slice of it, for one token) by a power of two
//    (amax -> [2^14, 2^15)), exact for every value down to 2^-28 of the largest, and undone in fp32 at the end.
// The only differences from the reference (dequantise, then an fp32-accumulating matmul) are the order of the
// fp32 sums and the tensor cores' accumulation rounding. Deterministic: fixed-order shared-memory reduction over
// the warps that split K, no atomics, so a graph replay equals eager bit for bit. Launched on torch's current
// stream (records into CUDA graphs).
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cstdint>

#include "e2m1.cuh"
#include "stream_load.cuh"
#include "pdl.cuh"

namespace {

constexpr int WARPS = 8;

__device__ __forceinline__ void mma_acc(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void mma_zero(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  const float z = 0.f;
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};\n"
      : "=f"(c[0]), "=f"(c[1]), "=f"(c[2]), "=f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(z));
}

// The A fragments of one packed word of each of the lane's two rows (a: row g, b: row g + 8 of the mma's 16):
// pairs 0, 1 of e2m1_pairs for the first mma (a0), pairs 2, 3 for the second (a1), rows interleaved as m16n8k16
// takes them
__device__ __forceinline__ void e2m1_frags(uint32_t wa, uint32_t wb, uint32_t (&a0)[4], uint32_t (&a1)[4]) {
  uint32_t pa[4], pb[4];
  e2m1_pairs(wa, pa);
  e2m1_pairs(wb, pb);
  a0[0] = pa[0]; a0[1] = pb[0]; a0[2] = pa[1]; a0[3] = pb[1];
  a1[0] = pa[2]; a1[1] = pb[2]; a1[2] = pa[3]; a1[3] = pb[3];
}

__device__ __forceinline__ uint32_t e4m3_pair(uint32_t two) {   // two e4m3 bytes (low 16 bits) -> fp16x2, exact
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two & 0xffffu), __NV_E4M3);
  return static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
}

__device__ __forceinline__ uint32_t hmul2(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("mul.rn.f16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

// Formats: 0 MXFP4, 1 NVFP4, 2 FP8. E: elements of one row a thread holds per piece; a piece is what the 4
// threads of an mma group hold of one row (4E elements); an iteration is 128 elements of K (ITER pieces).
template <int FMT> struct Mf {
  static constexpr int E = FMT == 2 ? 16 : 8;
  static constexpr int PIECE = 4 * E;
  static constexpr int ITER = 128 / PIECE;
};

// Where x[k] goes in shared memory: per token, per piece, per thread of the group, the fp16 B-fragment values
// in the order the thread's mmas read them (FP4: the pairs (j, j+4) of e2m1_pairs; FP8: natural order).
template <int FMT>
__device__ __forceinline__ int xslot(int k, int pieces, int b) {
  using F = Mf<FMT>;
  const int p = k / F::PIECE, kl = k % F::PIECE, t = kl / F::E, j = kl % F::E;
  const int slot = FMT == 2 ? j : ((j >> 1) & 1) * 4 + (j & 1) * 2 + (j >> 2);
  return ((b * pieces + p) * 4 + t) * F::E + slot;
}

// x into fp16 range per token (a power of two each, kept in xscale[]), stored as the B fragments the mmas read.
// Called after the first weight loads are issued, so the weight stream is already in flight. Rows of at most
// 2048 (one 16-byte load per thread and token): every token's load and amax at once, one barrier for all, then
// the conversion from the same registers (a barrier per token put 8 round trips to memory in a row before the
// first mma: the 1024-wide projections at 8 tokens ran at 17% of copy bandwidth). Longer rows, one token at a
// time (holding 8 tokens' 4 loads each would take 128 registers). 8 converted values per 16-byte shared store (a
// word's 8 codes map to 8 consecutive slots in both layouts).
constexpr int MAX_K = 4 * 8 * WARPS * 32;

__device__ __forceinline__ float amax8(const uint4& v) {
  const uint32_t q[4] = {v.x, v.y, v.z, v.w};
  float m = 0.f;
#pragma unroll
  for (int j = 0; j < 4; ++j) m = fmaxf(m, fmaxf(fabsf(__uint_as_float(q[j] << 16)), fabsf(__uint_as_float(q[j] & 0xffff0000u))));
  return m;
}

// the token's power of two from the block's amax (red[b * WARPS ..]): amax * 2^(14 - e) in [2^14, 2^15), below
// fp16's 65504; e clamped so both factors are normal floats. Returns the factor into fp16 range.
__device__ __forceinline__ float pow2_for(float m, float& undo) {
  const int e = m > 0.f ? max(min(static_cast<int>((__float_as_uint(m) >> 23) & 0xff) - 127, 127), -100) : 0;
  undo = __uint_as_float(static_cast<uint32_t>(e - 14 + 127) << 23);
  return __uint_as_float(static_cast<uint32_t>(14 - e + 127) << 23);
}

__device__ __forceinline__ float token_scale(const float* red, float* xscale, int b, int tid) {
  float m = 0.f;
#pragma unroll
  for (int i = 0; i < WARPS; ++i) m = fmaxf(m, red[b * WARPS + i]);
  float undo;
  const float inv = pow2_for(m, undo);
  if (tid == 0) xscale[b] = undo;
  return inv;
}

// ONE: the layout of fp4_dot1 (a warp's own chunks of one token; c counts its 8-element pieces): element
// 128 i + 32 t + 8 u + j of the warp's i-th chunk at half 128 i + 32 u + 8 t + (j's place in the word), so the 4
// lanes of a group read 4 consecutive 16-byte words.
template <int FMT, bool ONE>
__device__ __forceinline__ void store8(__half* xs, const uint4& v, float inv, int c, int pieces, int b) {
  const uint32_t q[4] = {v.x, v.y, v.z, v.w};
  __half h[8];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    h[2 * j] = __float2half_rn(__uint_as_float(q[j] << 16) * inv);
    h[2 * j + 1] = __float2half_rn(__uint_as_float(q[j] & 0xffff0000u) * inv);
  }
  __half o[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) o[xslot<FMT>(j, 1 << 20, 0) % Mf<FMT>::E % 8] = h[j];
  const int at = ONE ? ((c & ~15) << 3) + ((c & 3) << 5) + (((c >> 2) & 3) << 3) : xslot<FMT>(c * 8, pieces, b) & ~7;
  *reinterpret_cast<uint4*>(xs + at) = *reinterpret_cast<const uint4*>(o);
}

__device__ __forceinline__ float warp_max(float m) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  return m;
}

template <int FMT, int MAXT>
__device__ __forceinline__ void stage_x(const __nv_bfloat16* __restrict__ x, float* red, float* xscale, __half* xs,
                                        int nb, int K, int pieces, int tid, int lane, int warp) {
  constexpr int MAXC = MAX_K / 8 / (WARPS * 32);
  const int chunks = K / 8;
  const uint4* x4 = reinterpret_cast<const uint4*>(x);
  if (chunks <= WARPS * 32) {
    uint4 v[MAXT];
#pragma unroll
    for (int b = 0; b < MAXT; ++b)
      v[b] = b < nb && tid < chunks ? __ldg(x4 + static_cast<int64_t>(b) * chunks + tid) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int b = 0; b < MAXT; ++b) {
      const float m = warp_max(amax8(v[b]));
      if (b < nb && lane == 0) red[b * WARPS + warp] = m;
    }
    __syncthreads();
#pragma unroll
    for (int b = 0; b < MAXT; ++b) {
      if (b >= nb) continue;
      const float inv = token_scale(red, xscale, b, tid);
      if (tid < chunks) store8<FMT, false>(xs, v[b], inv, tid, pieces, b);
    }
  } else {
    for (int b = 0; b < nb && b < MAXT; ++b) {
      uint4 v[MAXC];
      float m = 0.f;
#pragma unroll
      for (int i = 0; i < MAXC; ++i) {
        const int c = tid + i * WARPS * 32;
        v[i] = c < chunks ? __ldg(x4 + static_cast<int64_t>(b) * chunks + c) : make_uint4(0, 0, 0, 0);
        m = fmaxf(m, amax8(v[i]));
      }
      m = warp_max(m);
      if (lane == 0) red[b * WARPS + warp] = m;
      __syncthreads();
      const float inv = token_scale(red, xscale, b, tid);
#pragma unroll
      for (int i = 0; i < MAXC; ++i) {
        const int c = tid + i * WARPS * 32;
        if (c < chunks) store8<FMT, false>(xs, v[i], inv, c, pieces, b);
      }
    }
  }
  __syncthreads();
}

// The FP4 loop of one warp for 2..8 tokens (one token takes fp4_dot1): rows ra, rb (the lane's two rows of a
// 16-row tile), iterations ks, ks + KS, ... of 128 elements of K. x is staged (stage_x) after the first weight
// loads are issued. acc holds the C fragment in units of 2^-14 (MXFP4: the e8m0 block scales applied; NVFP4: the
// block scales times 2^7 applied, the per-matrix scale not).
template <int FMT, int KS, int MAXT>
__device__ __forceinline__ void fp4_dot(const uint8_t* w, const uint8_t* s,
                                        const __nv_bfloat16* __restrict__ x, float* red, float* xscale, __half* xs,
                                        int nb, int N, int K, int ra, int rb, int tid, int lane, int warp, int ks,
                                        int t, int xb_tok, float (&acc)[4]) {
  const bool va = ra < N, vb = rb < N;
  const int pieces = K / Mf<FMT>::PIECE, iters = K / 128;
  const int64_t stride = K / 2;                                // bytes per row
  const int sbytes = FMT == 0 ? K / 32 : K / 16;               // scale bytes per row
  const uint32_t* pa = reinterpret_cast<const uint32_t*>(w + static_cast<int64_t>(va ? ra : 0) * stride) + t;
  const uint32_t* pb = reinterpret_cast<const uint32_t*>(w + static_cast<int64_t>(vb ? rb : 0) * stride) + t;
  const uint8_t* sa = s + static_cast<int64_t>(va ? ra : 0) * sbytes;
  const uint8_t* sb = s + static_cast<int64_t>(vb ? rb : 0) * sbytes;
  // loads are never predicated: rows past N read row 0, the tail reads the last iteration again (never stored)
  uint32_t qa[4], qb[4];
  uint2 sca, scb;
  auto fetch = [&](int it, uint32_t (&da)[4], uint32_t (&db)[4], uint2& ea, uint2& eb) {
    it = min(it, iters - 1);
#pragma unroll
    for (int u = 0; u < 4; ++u) {            // piece (4 it + u): 4 words per row, this thread's is t
      da[u] = __ldg(pa + (4 * it + u) * 4);
      db[u] = __ldg(pb + (4 * it + u) * 4);
    }
    if constexpr (FMT == 0) {                // one e8m0 byte per piece
      ea.x = __ldg(reinterpret_cast<const uint32_t*>(sa) + it);
      eb.x = __ldg(reinterpret_cast<const uint32_t*>(sb) + it);
    } else {                                 // two e4m3 bytes per piece
      ea = __ldg(reinterpret_cast<const uint2*>(sa) + it);
      eb = __ldg(reinterpret_cast<const uint2*>(sb) + it);
    }
  };
  fetch(ks, qa, qb, sca, scb);
  stage_x<FMT, MAXT>(x, red, xscale, xs, nb, K, pieces, tid, lane, warp);
  // NVFP4: the byte of this thread's block in piece u is 2u + t/2 of the iteration's 8; prmt selectors that put
  // it in both bytes of the low half (for the pair conversion)
  uint32_t sel[4];
#pragma unroll
  for (int u = 0; u < 4; ++u) { const uint32_t j = 2 * u + (t >> 1); sel[u] = j | (j << 4); }
  for (int it = ks; it < iters; it += KS) {
    uint32_t na[4], nbq[4];
    uint2 nsa, nsb;
    fetch(it + KS, na, nbq, nsa, nsb);
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const uint4 xv = reinterpret_cast<const uint4*>(xs)[(xb_tok * pieces + 4 * it + u) * 4 + t];
      uint32_t a0[4], a1[4];
      e2m1_frags(qa[u], qb[u], a0, a1);
      if constexpr (FMT == 0) {
        float c[4];
        mma_zero(c, a0, xv.x, xv.y);
        mma_acc(c, a1, xv.z, xv.w);
        const float wsa = __uint_as_float(((sca.x >> (8 * u)) & 0xffu) << 23);
        const float wsb = __uint_as_float(((scb.x >> (8 * u)) & 0xffu) << 23);
        acc[0] = fmaf(c[0], wsa, acc[0]);
        acc[2] = fmaf(c[2], wsb, acc[2]);
        acc[1] = fmaf(c[1], wsa, acc[1]);
        acc[3] = fmaf(c[3], wsb, acc[3]);
      } else {
        const uint32_t k7 = 0x58005800u;                 // fp16x2 (128, 128)
        const uint32_t fa = hmul2(e4m3_pair(__byte_perm(sca.x, sca.y, sel[u])), k7);
        const uint32_t fb = hmul2(e4m3_pair(__byte_perm(scb.x, scb.y, sel[u])), k7);
        a0[0] = hmul2(a0[0], fa); a0[2] = hmul2(a0[2], fa); a1[0] = hmul2(a1[0], fa); a1[2] = hmul2(a1[2], fa);
        a0[1] = hmul2(a0[1], fb); a0[3] = hmul2(a0[3], fb); a1[1] = hmul2(a1[1], fb); a1[3] = hmul2(a1[3], fb);
        mma_acc(acc, a0, xv.x, xv.y);
        mma_acc(acc, a1, xv.z, xv.w);
      }
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) { qa[u] = na[u]; qb[u] = nbq[u]; }
    sca = nsa;
    scb = nsb;
  }
}

// The FP4 loop for one token column (the one-token GEMV and the routed experts, one token per pair). With one
// token, 7 of an mma's 8 columns would idle; here they keep the scale blocks apart instead, which lets a lane
// load 16 bytes (32 codes) of each of its rows per 128-element chunk and never scale a weight before the mma.
// Lane t of a group holds codes 32 t .. 32 t + 31 of the chunk (words u = 0..3); half h of them (words 2h, 2h + 1)
// is one NVFP4 block, both halves one MXFP4 block. Column n = 2t + h of every mma gets x only at the k-slots of
// lane t and only in the mmas of half h's words; every other B value is 0. So D[row][2t + h] is the dot product
// of that half of the row's codes with x, and lane (g, t) holds exactly columns 2t, 2t + 1: its own halves, each
// multiplied by its block's scale in fp32 once per chunk. (fp4_dot's 4-byte loads kept the tensor-core GEMV
// L1-bound at one token: Nsight Compute, BENCHMARKS.md.) RING register sets of codes: RING - 1 chunks stay in
// flight while one is computed. x is staged by the warp itself (stage_x1) into xs, its XW_HALVES of shared
// memory. acc[r]: this lane's part of row ra (r = 0) / rb (r = 1), in units of 2^-14; the sum over the group's
// 4 lanes is the caller's.
constexpr int XW_CHUNKS = 16;                        // chunks of 128 a warp of fp4_dot1 takes at most
constexpr int XW_HALVES = XW_CHUNKS * 128 + 32;      // its shared x: the chunks, then 64 zero bytes

// x for fp4_dot1, by one warp for itself: only the chunks it computes (ks, ks + KS, ...), with its own power of
// two, into its own shared region (xw, XW_HALVES). No block barrier, and a warp reads 1/KS of x instead of all
// of it (the block-wide staging had every block read and convert the whole row for 16 rows of weights). Two
// passes over the warp's slice (amax, then convert; the second reads L1), so no lane holds more than 4 loads.
// Returns the factor that undoes the power of two.
template <int FMT, int KS>
__device__ __forceinline__ float stage_x1(const __nv_bfloat16* __restrict__ x, __half* xw, int K, int ks, int lane) {
  const int n = (K / 128 - ks + KS - 1) / KS;           // this warp's chunks: 16 pieces of 8 each
  const uint4* x4 = reinterpret_cast<const uint4*>(x);
  auto piece = [&](int q) { return q < 16 * n ? __ldg(x4 + (ks + (q >> 4) * KS) * 16 + (q & 15)) : make_uint4(0, 0, 0, 0); };
  float m = 0.f;
#pragma unroll 4
  for (int q = lane; q < 16 * n; q += 32) m = fmaxf(m, amax8(piece(q)));
  float undo;
  const float inv = pow2_for(warp_max(m), undo);
#pragma unroll 4
  for (int q = lane; q < 16 * n; q += 32) store8<FMT, true>(xw, piece(q), inv, q, 0, 0);
  if (lane < 4) reinterpret_cast<uint4*>(xw + XW_CHUNKS * 128)[lane] = make_uint4(0, 0, 0, 0);
  __syncwarp();
  return undo;
}

template <int FMT, int KS>
__device__ __forceinline__ void fp4_dot1(const uint8_t* w, const uint8_t* s,
                                         const __nv_bfloat16* __restrict__ x, __half* xs, int N, int K, int ra, int rb,
                                         int lane, int ks, float (&acc)[2]) {
  static_assert(FMT == 0 || FMT == 1, "FP4 only");
  constexpr int RING = 2;            // 3 (two chunks in flight, 80 registers, 3 blocks per SM) measured no faster
  const int g = lane >> 2, t = lane & 3, iters = K / 128;
  const int64_t rowa = ra < N ? ra : 0, rowb = rb < N ? rb : 0;       // rows past N read row 0, never stored
  const int64_t stride = K / 2, sbytes = FMT == 0 ? K / 32 : K / 16;
  const uint4* pa = reinterpret_cast<const uint4*>(w + rowa * stride) + t;
  const uint4* pb = reinterpret_cast<const uint4*>(w + rowb * stride) + t;
  const uint8_t* sa = s + rowa * sbytes + (FMT == 0 ? t : 2 * t);     // the lane's e8m0 byte / two e4m3 bytes
  const uint8_t* sb = s + rowb * sbytes + (FMT == 0 ? t : 2 * t);
  uint4 qa[RING], qb[RING];
  uint32_t ea[RING], eb[RING];
  auto fetch = [&](int it, int r) {       // the tail reads the last chunk again (never used)
    it = min(it, iters - 1);
    qa[r] = ld_stream<true>(pa + 4 * it);
    qb[r] = ld_stream<true>(pb + 4 * it);
    if constexpr (FMT == 0) {
      ea[r] = __ldg(sa + 4 * it);
      eb[r] = __ldg(sb + 4 * it);
    } else {
      ea[r] = __ldg(reinterpret_cast<const uint16_t*>(sa + 8 * it));
      eb[r] = __ldg(reinterpret_cast<const uint16_t*>(sb + 8 * it));
    }
  };
#pragma unroll
  for (int r = 0; r < RING - 1; ++r) fetch(ks + r * KS, r);
  const float undo = stage_x1<FMT, KS>(x, xs, K, ks, lane);
  // this lane feeds column g when it is lane g / 2 of its group, with x of the words of half g & 1; its other B
  // values come from the 64 zero bytes after the warp's x (a broadcast read)
  const bool feeds = t == (g >> 1), lo = feeds && !(g & 1), hi = feeds && (g & 1);
  const uint4* xw = reinterpret_cast<const uint4*>(xs) + t;          // the warp's chunk i, word u: + 16 i + 4 u
  const uint4* zero = reinterpret_cast<const uint4*>(xs + XW_CHUNKS * 128);
  for (int it0 = ks, i0 = 0; it0 < iters; it0 += RING * KS, i0 += RING) {
#pragma unroll
    for (int r = 0; r < RING; ++r) {
      const int it = it0 + r * KS;
      fetch(it + (RING - 1) * KS, (r + RING - 1) % RING);
      if (it >= iters) break;
      const uint4* xl = lo ? xw + 16 * (i0 + r) : zero;
      const uint4* xh = hi ? xw + 16 * (i0 + r) + 8 : zero;
      const uint4 xv[4] = {xl[0], xl[lo ? 4 : 1], xh[0], xh[hi ? 4 : 1]};
      const uint32_t wa[4] = {qa[r].x, qa[r].y, qa[r].z, qa[r].w};
      const uint32_t wb[4] = {qb[r].x, qb[r].y, qb[r].z, qb[r].w};
      float c[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        uint32_t a0[4], a1[4];
        e2m1_frags(wa[u], wb[u], a0, a1);
        if (u == 0) mma_zero(c, a0, xv[u].x, xv[u].y);
        else mma_acc(c, a0, xv[u].x, xv[u].y);
        mma_acc(c, a1, xv[u].z, xv[u].w);
      }
      float sc[4];                         // the scales of columns 2t, 2t + 1 of rows ra, rb
      if constexpr (FMT == 0) {
        sc[0] = sc[1] = __uint_as_float(ea[r] << 23);
        sc[2] = sc[3] = __uint_as_float(eb[r] << 23);
      } else {
        const float2 fa = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(ea[r]), __NV_E4M3)));
        const float2 fb = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(eb[r]), __NV_E4M3)));
        sc[0] = fa.x; sc[1] = fa.y; sc[2] = fb.x; sc[3] = fb.y;
      }
      acc[0] = fmaf(c[1], sc[1], fmaf(c[0], sc[0], acc[0]));
      acc[1] = fmaf(c[3], sc[3], fmaf(c[2], sc[2], acc[1]));
    }
  }
  acc[0] *= undo;
  acc[1] *= undo;
}

// the sum of a row's part over the 4 lanes of a group (every lane gets it; a fixed order: deterministic)
__device__ __forceinline__ float group_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// one FP4 token (fp4_dot1) fits 64 registers: 4 blocks per SM
template <int FMT, int KS, int MAXT>
__global__ void __launch_bounds__(WARPS * 32, FMT != 2 && MAXT == 1 ? 4 : 3)
mma_gemv_kernel(const __nv_bfloat16* __restrict__ x, __nv_bfloat16* __restrict__ out, const uint8_t* __restrict__ w,
                const uint8_t* __restrict__ s, const float* __restrict__ g, int nb, int N, int K, bool pf) {
  // the block's rows of codes ([N, K] FP8, [N, K/2] FP4) are one contiguous slab
  pdl_enter(pf, w + static_cast<int64_t>(blockIdx.x) * (WARPS / KS) * 16 * (FMT == 2 ? K : K / 2), 1, 0,
            static_cast<int64_t>(max(0, min((WARPS / KS) * 16, N - static_cast<int>(blockIdx.x) * (WARPS / KS) * 16))) *
                (FMT == 2 ? K : K / 2));
  using F = Mf<FMT>;
  constexpr int RT = WARPS / KS;                       // 16-row tiles per block
  extern __shared__ __align__(16) unsigned char smem[];
  float* red = reinterpret_cast<float*>(smem);                         // [WARPS][32][4] partial sums
  float* xscale = red + WARPS * 32 * 4;                                // [8] per-token power of two
  __half* xs = reinterpret_cast<__half*>(xscale + 8);                  // [nb][pieces][4][E] or [WARPS][XW_HALVES]
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int gq = lane >> 2, t = lane & 3;
  const int pieces = K / F::PIECE;

  const int rt = warp / KS, ks = warp % KS;
  const int r0 = (blockIdx.x * RT + rt) * 16;
  const int ra = r0 + gq, rb = r0 + gq + 8;
  const bool va = ra < N, vb = rb < N;
  // this lane's B column: token gq; past the batch it reads token nb-1 again (its sums land in columns that are
  // never stored), so no load is predicated
  const int xb_tok = min(gq, nb - 1);
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  const int iters = K / 128;

  if constexpr (FMT == 2) {
    const int64_t sk = (K + 127) / 128;
    const uint4* pa = reinterpret_cast<const uint4*>(w + static_cast<int64_t>(va ? ra : 0) * K) + t;
    const uint4* pb = reinterpret_cast<const uint4*>(w + static_cast<int64_t>(vb ? rb : 0) * K) + t;
    const float* srow = reinterpret_cast<const float*>(s) + static_cast<int64_t>((r0 < N ? r0 : 0) / 128) * sk;
    uint4 qa[2], qb[2];
    auto fetch = [&](int it, uint4 (&da)[2], uint4 (&db)[2]) {
      it = min(it, iters - 1);
#pragma unroll
      for (int u = 0; u < 2; ++u) {          // piece (2 it + u) of 64 elements: 4 uint4 per row, this thread's is t
        da[u] = __ldg(pa + (2 * it + u) * 4);
        db[u] = __ldg(pb + (2 * it + u) * 4);
      }
    };
    fetch(ks, qa, qb);
    stage_x<FMT, MAXT>(x, red, xscale, xs, nb, K, pieces, tid, lane, warp);
    for (int it = ks; it < iters; it += KS) {
      uint4 na[2], nb2[2];
      fetch(it + KS, na, nb2);
      float c[4];
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const uint4 xv0 = reinterpret_cast<const uint4*>(xs)[((xb_tok * pieces + 2 * it + u) * 4 + t) * 2];
        const uint4 xv1 = reinterpret_cast<const uint4*>(xs)[((xb_tok * pieces + 2 * it + u) * 4 + t) * 2 + 1];
        const uint32_t wa[4] = {qa[u].x, qa[u].y, qa[u].z, qa[u].w}, wb[4] = {qb[u].x, qb[u].y, qb[u].z, qb[u].w};
        const uint32_t xb[8] = {xv0.x, xv0.y, xv0.z, xv0.w, xv1.x, xv1.y, xv1.z, xv1.w};
#pragma unroll
        for (int m = 0; m < 4; ++m) {
          const uint32_t a[4] = {e4m3_pair(wa[m]), e4m3_pair(wb[m]), e4m3_pair(wa[m] >> 16), e4m3_pair(wb[m] >> 16)};
          if (u == 0 && m == 0) mma_zero(c, a, xb[2 * m], xb[2 * m + 1]);
          else mma_acc(c, a, xb[2 * m], xb[2 * m + 1]);
        }
      }
      const float ws = __ldg(srow + it);
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[i] = fmaf(c[i], ws, acc[i]);
#pragma unroll
      for (int u = 0; u < 2; ++u) { qa[u] = na[u]; qb[u] = nb2[u]; }
    }
  } else if constexpr (MAXT == 1) {
    float a1[2] = {0.f, 0.f};
    fp4_dot1<FMT, KS>(w, s, x, xs + warp * XW_HALVES, N, K, ra, rb, lane, ks, a1);
    acc[0] = group_sum(a1[0]);                       // token column 0 of rows ra, rb: where fp4_dot leaves them
    acc[2] = group_sum(a1[1]);
  } else {
    fp4_dot<FMT, KS, MAXT>(w, s, x, red, xscale, xs, nb, N, K, ra, rb, tid, lane, warp, ks, t, xb_tok, acc);
  }

  // -- fixed-order sum over the KS warps of a row tile, then the scales that were left for the end -----------
  __syncthreads();                                  // the prologue's use of red[] is over
#pragma unroll
  for (int i = 0; i < 4; ++i) red[(warp * 32 + lane) * 4 + i] = acc[i];
  __syncthreads();
  if (ks != 0) return;
  float v[4] = {0.f, 0.f, 0.f, 0.f};
  for (int j = 0; j < KS; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) v[i] += red[((warp + j) * 32 + lane) * 4 + i];
  // 2^14 of e2m1_pairs (MXFP4); 2^14 * 2^-7 and scale2 (NVFP4; fp4_dot1 scales in fp32: no 2^7). fp4_dot1 also
  // undid its warps' powers of two of x; the other loops leave the token's in xscale[]
  constexpr bool ONE = FMT != 2 && MAXT == 1;
  float undo = 1.f;
  if constexpr (FMT == 0) undo = 16384.f;
  if constexpr (FMT == 1) undo = (ONE ? 16384.f : 128.f) * __ldg(g);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int row = i < 2 ? ra : rb, tok = 2 * t + (i & 1);
    if (row < N && tok < nb && tok < MAXT)
      out[static_cast<int64_t>(tok) * N + row] = __float2bfloat16(v[i] * undo * (ONE ? 1.f : xscale[tok]));
  }
}

// The routed experts of a decode batch: block (tile, p) computes pair p (token p / xdiv, expert idx[p]) against
// 16 rows (MODE 1: w1 in warps 0-3, w3 in warps 4-7, each set splitting K) or 16 * WARPS / KS rows (MODE 2) of
// its expert's matrices: the one-column loop of the GEMV (fp4_dot1), one matrix per warp, so a warp fits 64
// registers and 4 blocks share an SM (with w1 and w3 in each warp it took 128: 2 blocks, 47% of copy bandwidth).
//   MODE 1: out[p, n] = wts[p] * swiglu(w1[e] x, w3[e] x)  (bf16; clamp before SiLU when has_limit)
//   MODE 2: out[p, n] = w2[e] h[p]                          (fp32)
// Each projection's output is rounded to bf16 first, as the reference's bf16 linears do.
// pairs_first: the pair is blockIdx.x and the tile blockIdx.y, so the blocks resident at once hold the same few
// tiles of every pair: pairs routed to one expert (a batch's tokens share experts: 8 tokens x 6 picks hit ~33 of
// Flash's experts, not 48) read each tile of its weights together, and all but the first read it from L2. With the
// pair in blockIdx.y, each pair's tiles went through the GPU in turn and every pair read its expert from memory.
// Only the schedule differs: every pair's sums are the same, bit for bit.
template <int FMT, int MODE, int KS>
__global__ void __launch_bounds__(WARPS * 32, 4)
mma_experts_kernel(const __nv_bfloat16* __restrict__ x, const int64_t* __restrict__ idx, const float* __restrict__ wts,
                   void* __restrict__ out, const uint8_t* __restrict__ wa, const uint8_t* __restrict__ sa,
                   const float* __restrict__ ga, const uint8_t* __restrict__ wb, const uint8_t* __restrict__ sb,
                   const float* __restrict__ gb, int xdiv, int N, int K, float limit, bool has_limit,
                   bool pairs_first) {
  static_assert(FMT != 2 && (MODE == 2 || KS * 2 == WARPS), "experts are FP4; mode 1 puts w1 and w3 in half the warps each");
  pdl_enter();
  constexpr int NM = MODE == 1 ? 2 : 1, RT = MODE == 1 ? 1 : WARPS / KS;
  extern __shared__ __align__(16) unsigned char smem[];
  float* red = reinterpret_cast<float*>(smem);                         // [WARPS][8][2] each warp's row sums
  __half* xs = reinterpret_cast<__half*>(red + WARPS * 16);            // [WARPS][XW_HALVES]
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, gq = lane >> 2, t = lane & 3;
  const int p = pairs_first ? blockIdx.x : blockIdx.y, tile = pairs_first ? blockIdx.y : blockIdx.x;
  const int grp = warp / KS, ks = warp % KS;
  const int m = MODE == 1 ? grp : 0, rt = MODE == 1 ? 0 : grp;
  const int64_t e = __ldg(idx + p);
  const int ra = (tile * RT + rt) * 16 + gq, rb = ra + 8;
  const int64_t wsize = static_cast<int64_t>(N) * (K / 2), ssize = static_cast<int64_t>(N) * (FMT == 0 ? K / 32 : K / 16);
  float acc[2] = {0.f, 0.f};
  fp4_dot1<FMT, KS>((m == 0 ? wa : wb) + e * wsize, (m == 0 ? sa : sb) + e * ssize, x + static_cast<int64_t>(p / xdiv) * K,
                    xs + warp * XW_HALVES, N, K, ra, rb, lane, ks, acc);
  const float sa_ = group_sum(acc[0]), sb_ = group_sum(acc[1]);
  if (t == 0) {
    red[(warp * 8 + gq) * 2] = sa_;
    red[(warp * 8 + gq) * 2 + 1] = sb_;
  }
  __syncthreads();
  if (ks != 0 || t != 0 || m != 0) return;        // warp 0 (mode 1) or each tile's first warp (mode 2) finishes
  float v[NM][2];
#pragma unroll
  for (int mm = 0; mm < NM; ++mm)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      v[mm][r] = 0.f;
      for (int j = 0; j < KS; ++j) v[mm][r] += red[((warp + mm * KS + j) * 8 + gq) * 2 + r];
    }
  float undo[NM];
#pragma unroll
  for (int mm = 0; mm < NM; ++mm) {
    undo[mm] = 16384.f;                                                  // 2^14 of e2m1_pairs
    if constexpr (FMT == 1) undo[mm] *= __ldg((mm == 0 ? ga : gb) + e);  // scale2 of expert e
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = r == 0 ? ra : rb;
    if (row >= N) continue;
    float a = __bfloat162float(__float2bfloat16(v[0][r] * undo[0]));
    if constexpr (MODE == 1) {
      float u = __bfloat162float(__float2bfloat16(v[NM - 1][r] * undo[NM - 1]));
      if (has_limit) { a = fminf(a, limit); u = fminf(fmaxf(u, -limit), limit); }   // clamp, then SiLU
      a = a / (1.f + expf(-a)) * u * __ldg(wts + p);
      static_cast<__nv_bfloat16*>(out)[static_cast<int64_t>(p) * N + row] = __float2bfloat16(a);
    } else {
      static_cast<float*>(out)[static_cast<int64_t>(p) * N + row] = a;
    }
  }
}

template <int FMT, int KS, int MAXT>
void launch(const torch::Tensor& x, torch::Tensor& out, const torch::Tensor& w, const torch::Tensor& s,
            const torch::Tensor& g, int nb, int N, int K) {
  constexpr int RT = WARPS / KS;
  const int pieces = K / Mf<FMT>::PIECE;
  const size_t bytes = WARPS * 32 * 4 * sizeof(float) + 8 * sizeof(float) +
                       (FMT != 2 && MAXT == 1 ? WARPS * XW_HALVES : static_cast<size_t>(nb) * pieces * 4 * Mf<FMT>::E) * sizeof(__half);
  auto kernel = mma_gemv_kernel<FMT, KS, MAXT>;
  if (bytes > 48 * 1024) C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  const dim3 grid((N + RT * 16 - 1) / (RT * 16));
  pdl_launch(kernel, grid, dim3(WARPS * 32), bytes, at::cuda::getCurrentCUDAStream(), nullptr, 0,
      reinterpret_cast<const __nv_bfloat16*>(x.data_ptr()), reinterpret_cast<__nv_bfloat16*>(out.data_ptr()),
      static_cast<const uint8_t*>(w.data_ptr()), static_cast<const uint8_t*>(s.data_ptr()), g.data_ptr<float>(), nb, N, K,
      pdl_prefetch());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <int FMT, int MODE, int KS>
void launch_experts(const torch::Tensor& x, const torch::Tensor& idx, const torch::Tensor& wts, torch::Tensor& out,
                    const torch::Tensor& wa, const torch::Tensor& sa, const torch::Tensor& ga, const torch::Tensor& wb,
                    const torch::Tensor& sb, const torch::Tensor& gb, int P, int xdiv, int N, int K, float limit,
                    bool has_limit, bool pairs_first) {
  constexpr int RT = MODE == 1 ? 1 : WARPS / KS;
  const size_t bytes = WARPS * 16 * sizeof(float) + WARPS * XW_HALVES * sizeof(__half);
  auto kernel = mma_experts_kernel<FMT, MODE, KS>;
  if (bytes > 48 * 1024) C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  const int tiles = (N + RT * 16 - 1) / (RT * 16);
  const dim3 grid(pairs_first ? P : tiles, pairs_first ? tiles : P);
  pdl_launch(kernel, grid, dim3(WARPS * 32), bytes, at::cuda::getCurrentCUDAStream(), nullptr, 0,
      reinterpret_cast<const __nv_bfloat16*>(x.data_ptr()), idx.data_ptr<int64_t>(), wts.data_ptr<float>(), out.data_ptr(),
      static_cast<const uint8_t*>(wa.data_ptr()), static_cast<const uint8_t*>(sa.data_ptr()), ga.data_ptr<float>(),
      static_cast<const uint8_t*>(wb.data_ptr()), static_cast<const uint8_t*>(sb.data_ptr()), gb.data_ptr<float>(),
      xdiv, N, K, limit, has_limit, pairs_first);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <int FMT, int KS>
void by_width(const torch::Tensor& x, torch::Tensor& out, const torch::Tensor& w, const torch::Tensor& s,
              const torch::Tensor& g, int nb, int N, int K) {
  if (nb == 1) launch<FMT, KS, 1>(x, out, w, s, g, nb, N, K);
  else launch<FMT, KS, 8>(x, out, w, s, g, nb, N, K);
}

template <int FMT>
void by_split(const torch::Tensor& x, torch::Tensor& out, const torch::Tensor& w, const torch::Tensor& s,
              const torch::Tensor& g, int nb, int N, int K, int ks) {
  if (ks == 8) by_width<FMT, 8>(x, out, w, s, g, nb, N, K);
  else if (ks == 4) by_width<FMT, 4>(x, out, w, s, g, nb, N, K);
  else by_width<FMT, 2>(x, out, w, s, g, nb, N, K);
}

}  // namespace

// The Python wrapper (cuda_kernel.py `mma_gemv_cuda`) checks every input first and raises ValueError; the checks
// here only keep a launch inside its buffers.
void mma_gemv(const torch::Tensor& x, torch::Tensor out, const torch::Tensor& w, const torch::Tensor& s,
              const torch::Tensor& g, int64_t fmt, int64_t ks, int64_t pdl) {
  const PdlScope launches(pdl);
  TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == at::kBFloat16 && x.dim() == 2, "mma_gemv: x must be contiguous bf16 [B, K]");
  const int64_t nb = x.size(0), K = x.size(1), N = out.size(1);
  TORCH_CHECK(nb >= 1 && nb <= 8 && K % 128 == 0 && K <= MAX_K && out.size(0) == nb, "mma_gemv: B in 1..8 and K % 128 == 0, K <= 8192 expected");
  TORCH_CHECK(fmt >= 0 && fmt <= 2 && (ks == 2 || ks == 4 || ks == 8), "mma_gemv: bad format ", fmt, " or split ", ks);
  TORCH_CHECK(w.numel() == N * (fmt == 2 ? K : K / 2) && w.is_contiguous(), "mma_gemv: weight size does not match [N, K]");
  TORCH_CHECK(nb > 1 || fmt == 2 || K / 128 <= XW_CHUNKS * ks, "mma_gemv: one token: at most ", XW_CHUNKS, " chunks of 128 per warp");
  if (N == 0) return;
  const int b = static_cast<int>(nb), n = static_cast<int>(N), k = static_cast<int>(K), split = static_cast<int>(ks);
  if (fmt == 0) by_split<0>(x, out, w, s, g, b, n, k, split);
  else if (fmt == 1) by_split<1>(x, out, w, s, g, b, n, k, split);
  else by_split<2>(x, out, w, s, g, b, n, k, split);
}

// Routed experts on the tensor cores (bf16 x, FP4 experts, K a multiple of 128): mode 1 (w1, w3, SwiGLU, routing
// weight -> bf16 [P, N]) or mode 2 (w2 -> fp32 [P, N]). The wrapper (`routed_experts_cuda`) checks first.
void mma_experts(const torch::Tensor& x, const torch::Tensor& idx, const torch::Tensor& wts, torch::Tensor out,
                 const torch::Tensor& wa, const torch::Tensor& sa, const torch::Tensor& ga, const torch::Tensor& wb,
                 const torch::Tensor& sb, const torch::Tensor& gb, int64_t P, int64_t xdiv, int64_t N, int64_t K,
                 double limit, bool has_limit, int64_t fmt, int64_t mode, bool pairs_first, int64_t pdl) {
  const PdlScope launches(pdl);
  TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == at::kBFloat16 && K % 128 == 0 && K <= MAX_K && x.size(-1) == K,
              "mma_experts: x must be contiguous bf16 [rows, K] with K % 128 == 0, K <= 8192");
  TORCH_CHECK(idx.scalar_type() == at::kLong && wts.scalar_type() == at::kFloat && idx.numel() >= P && wts.numel() >= P,
              "mma_experts: idx int64 and wts fp32 with P entries expected");
  TORCH_CHECK((fmt == 0 || fmt == 1) && (mode == 1 || mode == 2), "mma_experts: bad format ", fmt, " or mode ", mode);
  TORCH_CHECK(out.is_contiguous() && out.numel() == P * N && out.scalar_type() == (mode == 1 ? at::kBFloat16 : at::kFloat),
              "mma_experts: out must be contiguous [P, N], bf16 (mode 1) or fp32 (mode 2)");
  TORCH_CHECK(pairs_first ? P <= INT32_MAX : P <= 65535, "mma_experts: ", P, " pairs are more than the grid takes");
  if (P == 0 || N == 0) return;
  const int p = static_cast<int>(P), xd = static_cast<int>(xdiv), n = static_cast<int>(N), k = static_cast<int>(K);
  const float lim = static_cast<float>(limit);
  // mode 1: 4 warps split K for each of w1 and w3; mode 2: 8 warps over one 16-row tile from 32 chunks of 128 up,
  // else 4 warps over each of two tiles (w2, K = inter 2048: 4 chunks a warp, not 2 behind each staging of x)
  const bool wide = K / 128 >= 32;
#define DSV4_EXPERTS(F, KS2) (mode == 1 ? launch_experts<F, 1, WARPS / 2>(x, idx, wts, out, wa, sa, ga, wb, sb, gb, p, xd, n, k, lim, has_limit, pairs_first) \
                                        : launch_experts<F, 2, KS2>(x, idx, wts, out, wa, sa, ga, wb, sb, gb, p, xd, n, k, lim, has_limit, pairs_first))
  if (fmt == 0 && wide) DSV4_EXPERTS(0, 8);
  else if (fmt == 0) DSV4_EXPERTS(0, 4);
  else if (wide) DSV4_EXPERTS(1, 8);
  else DSV4_EXPERTS(1, 4);
#undef DSV4_EXPERTS
}
