// FP4 (MXFP4 / NVFP4) weight-only GEMVs for decode in CUDA C++: single projections and the routed experts of a
// MoE layer, the same three modes as triton_kernel.py (built by cuda_kernel.py with torch's extension loader).
//
// Why CUDA cores and not the tensor cores: at decode a matrix row meets at most 8 token columns, and what limits
// the speed is how fast the packed weights stream in (0.53 / 0.56 bytes per weight), then how few instructions
// each weight costs once it is in a register. Each lane takes 16-byte pieces (32 weights, one MXFP4 scale block
// or two NVFP4 blocks) of R rows at once, so every load is a full 16-byte access, R rows share one read of x,
// and several loads are in flight per lane. A packed word of 8 codes becomes fp16 numbers e2m1 * 2^-14 with two
// byte permutes and a shift-and-mask per pair (exact: code 1 is the fp16 subnormal 2^-15), then fp32 by the
// hardware conversion; the block's partial sum in fp32 is multiplied once by its scale (times 2^14). The warp
// sums its lanes with shuffles, so the result is deterministic (no atomics): a graph replay equals eager bit for
// bit. Launched on torch's current stream, so it records into CUDA graphs.
//
// Modes (rows of the output are tokens for mode 0, token-expert pairs for modes 1 and 2):
//   0: out[b, n] = x[b] . W[n]                                 (x dtype)
//   1: out[p, n] = wts[p] * swiglu(w1[e] x, w3[e] x)           (x dtype; clamp before SiLU when has_limit)
//   2: out[p, n] = w2[e] h[p]                                  (fp32)
// A program (blockIdx.x = p) of modes 1 and 2 works only if pair p leads a run of up to MAXT pairs that chose the
// same expert (their ranks among that expert's pairs are rank_p .. rank_p + MAXT - 1, rank_p % MAXT == 0); it
// then reads that expert's rows once for all of them. Nothing is sorted and nothing is read back by the host.
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cstdint>

namespace {

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

// 8 e2m1 codes (byte i: element 2i low nibble, 2i+1 high) -> fp32 values * 2^-14, in element order.
__device__ __forceinline__ void e2m1x8(uint32_t v, float (&w)[8]) {
  const uint32_t t0 = __byte_perm(v, 0u, 0x4140), t1 = __byte_perm(v, 0u, 0x4342);   // bytes (0,1), (2,3) -> halves
  const float2 a = half2_bits(((t0 << 9) & 0x0E000E00u) | ((t0 << 12) & 0x80008000u));  // elements 0, 2
  const float2 b = half2_bits(((t0 << 5) & 0x0E000E00u) | ((t0 << 8) & 0x80008000u));   // 1, 3
  const float2 c = half2_bits(((t1 << 9) & 0x0E000E00u) | ((t1 << 12) & 0x80008000u));  // 4, 6
  const float2 d = half2_bits(((t1 << 5) & 0x0E000E00u) | ((t1 << 8) & 0x80008000u));   // 5, 7
  w[0] = a.x; w[2] = a.y; w[1] = b.x; w[3] = b.y; w[4] = c.x; w[6] = c.y; w[5] = d.x; w[7] = d.y;
}

template <int FMT>                  // 0: e8m0 byte (2^(E-127)); 1: e4m3 byte. Times 2^14, undoing e2m1x8's 2^-14.
__device__ __forceinline__ float block_scale(uint8_t s) {
  if constexpr (FMT == 0) {
    return __uint_as_float(static_cast<uint32_t>(s) << 23) * 16384.f;
  } else {
    __nv_fp8_e4m3 f;
    f.__x = s;
    return static_cast<float>(f) * 16384.f;
  }
}

__device__ __forceinline__ float round_bf16(float v) { return __bfloat162float(__float2bfloat16(v)); }
__device__ __forceinline__ void store(float* p, float v) { *p = v; }
__device__ __forceinline__ void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16(v); }

// rows [row0, row0 + R) of one matrix (packed codes w, scales s) against the token rows xrow[0..nb): acc[r][b]
template <int FMT, int R, int MAXT, typename XT>
__device__ __forceinline__ void rows_dot(const uint8_t* __restrict__ w, const uint8_t* __restrict__ s,
                                         const XT* __restrict__ x, const int64_t (&xrow)[MAXT], int nb, int row0,
                                         int N, int K, int lane, float (&acc)[R][MAXT]) {
  const int chunks = K / 32, half = K / 2, sper = FMT == 0 ? K / 32 : K / 16;
#pragma unroll 2
  for (int c = lane; c < chunks; c += 32) {
    uint4 q[R];
    float sc[R][2];
#pragma unroll
    for (int r = 0; r < R; ++r) {                     // every row's 16 bytes first: R loads in flight
      const int row = row0 + r;
      if (row < N) {
        q[r] = __ldg(reinterpret_cast<const uint4*>(w + static_cast<int64_t>(row) * half) + c);
        if constexpr (FMT == 0) {
          sc[r][0] = sc[r][1] = block_scale<0>(__ldg(s + static_cast<int64_t>(row) * sper + c));
        } else {
          const uint16_t two = __ldg(reinterpret_cast<const uint16_t*>(s + static_cast<int64_t>(row) * sper) + c);
          sc[r][0] = block_scale<1>(two & 0xff);
          sc[r][1] = block_scale<1>(two >> 8);
        }
      } else {
        q[r] = make_uint4(0, 0, 0, 0);
        sc[r][0] = sc[r][1] = 0.f;
      }
    }
    float blk[R][MAXT];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int b = 0; b < MAXT; ++b) blk[r][b] = 0.f;
#pragma unroll
    for (int j = 0; j < 4; ++j) {                     // 8 elements per 32-bit word
      float wf[R][8];
#pragma unroll
      for (int r = 0; r < R; ++r) e2m1x8(j == 0 ? q[r].x : j == 1 ? q[r].y : j == 2 ? q[r].z : q[r].w, wf[r]);
#pragma unroll
      for (int b = 0; b < MAXT; ++b) {
        if (b < nb) {
          float xv[8];
          load8(x + xrow[b] * K + c * 32 + j * 8, xv);
#pragma unroll
          for (int r = 0; r < R; ++r)
#pragma unroll
            for (int i = 0; i < 8; ++i) blk[r][b] = fmaf(wf[r][i], xv[i], blk[r][b]);
        }
      }
      if (FMT == 1 && j == 1) {                       // NVFP4: the first 16 elements are a block of their own
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
          for (int b = 0; b < MAXT; ++b) {
            acc[r][b] = fmaf(blk[r][b], sc[r][0], acc[r][b]);
            blk[r][b] = 0.f;
          }
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int b = 0; b < MAXT; ++b) acc[r][b] = fmaf(blk[r][b], sc[r][1], acc[r][b]);
  }
}

template <int R, int MAXT>
__device__ __forceinline__ void warp_sum(float (&acc)[R][MAXT], int nb) {
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int b = 0; b < MAXT; ++b)
      if (b < nb)
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) acc[r][b] += __shfl_xor_sync(FULL, acc[r][b], o);
}

// Which pairs this program computes: member[b] for b < nb. Modes 1, 2: the run of pairs that chose pair p's
// expert, led by p (nb = 0 when p leads none). Mode 0: tokens p*MAXT .. p*MAXT + MAXT - 1.
template <int MODE, int MAXT>
__device__ __forceinline__ int members(const int64_t* __restrict__ idx, int p, int P, int lane, int64_t& e,
                                       int (&member)[MAXT]) {
  if constexpr (MODE == 0) {
    e = 0;
#pragma unroll
    for (int b = 0; b < MAXT; ++b) member[b] = p * MAXT + b;
    return min(MAXT, P - p * MAXT);
  } else {
    e = __ldg(idx + p);
    int rank = 0;                                     // pairs before p that chose e
    for (int base = 0; base < p; base += 32) {
      const int q = base + lane;
      const unsigned m = __ballot_sync(FULL, q < p && __ldg(idx + q) == e);
      rank += __popc(m);
    }
    if (rank % MAXT != 0) return 0;
    int nb = 0;                                       // pairs from p on that chose e, in order
    for (int base = p; base < P && nb < MAXT; base += 32) {
      const int q = base + lane;
      unsigned m = __ballot_sync(FULL, q < P && __ldg(idx + q) == e);
#pragma unroll
      for (int b = 0; b < MAXT; ++b) {
        if (b == nb && m != 0u) {
          member[b] = base + __ffs(m) - 1;
          m &= m - 1;
          ++nb;
        }
      }
    }
    return nb;
  }
}

template <int FMT, int MODE, int R, int MAXT, typename XT, typename OT>
__global__ void __launch_bounds__(WARPS * 32)
fp4_rows_kernel(const XT* __restrict__ x, const int64_t* __restrict__ idx, const float* __restrict__ wts,
                OT* __restrict__ out, const uint8_t* __restrict__ wa, const uint8_t* __restrict__ sa,
                const float* __restrict__ ga, const uint8_t* __restrict__ wb, const uint8_t* __restrict__ sb,
                const float* __restrict__ gb, int P, int xdiv, int N, int K, float limit, bool has_limit,
                bool round) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int p = blockIdx.x;
  int64_t e;
  int member[MAXT];
  const int nb = members<MODE, MAXT>(idx, p, P, lane, e, member);
  if (nb <= 0) return;                                // uniform across the block
  int64_t xrow[MAXT];
#pragma unroll
  for (int b = 0; b < MAXT; ++b) xrow[b] = b < nb ? member[b] / xdiv : 0;
  const int row0 = (blockIdx.y * WARPS + warp) * R;
  if (row0 >= N) return;
  const int64_t half = K / 2, sper = FMT == 0 ? K / 32 : K / 16;
  float acc[R][MAXT];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int b = 0; b < MAXT; ++b) acc[r][b] = 0.f;
  rows_dot<FMT, R, MAXT, XT>(wa + e * N * half, sa + e * N * sper, x, xrow, nb, row0, N, K, lane, acc);
  warp_sum<R, MAXT>(acc, nb);
  const float gsa = FMT == 1 ? __ldg(ga + e) : 1.f;
  if constexpr (MODE == 1) {
    float acc3[R][MAXT];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int b = 0; b < MAXT; ++b) acc3[r][b] = 0.f;
    rows_dot<FMT, R, MAXT, XT>(wb + e * N * half, sb + e * N * sper, x, xrow, nb, row0, N, K, lane, acc3);
    warp_sum<R, MAXT>(acc3, nb);
    const float gsb = FMT == 1 ? __ldg(gb + e) : 1.f;
    if (lane == 0) {
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int b = 0; b < MAXT; ++b) {
          if (b < nb && row0 + r < N) {
            float g = acc[r][b] * gsa, u = acc3[r][b] * gsb;
            if (round) { g = round_bf16(g); u = round_bf16(u); }       // each projection's output in bf16
            if (has_limit) { g = fminf(g, limit); u = fminf(fmaxf(u, -limit), limit); }   // clamp, then SiLU
            const float h = g / (1.f + expf(-g)) * u * __ldg(wts + member[b]);
            store(out + static_cast<int64_t>(member[b]) * N + row0 + r, h);
          }
        }
    }
  } else {
    if (lane == 0) {
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int b = 0; b < MAXT; ++b) {
          if (b < nb && row0 + r < N) {
            float v = acc[r][b] * gsa;
            if (round) v = round_bf16(v);
            store(out + static_cast<int64_t>(member[b]) * N + row0 + r, v);
          }
        }
    }
  }
}

template <int FMT, int MODE, int MAXT, typename XT, typename OT>
void launch(const torch::Tensor& x, const torch::Tensor& idx, const torch::Tensor& wts, torch::Tensor& out,
            const torch::Tensor& wa, const torch::Tensor& sa, const torch::Tensor& ga, const torch::Tensor& wb,
            const torch::Tensor& sb, const torch::Tensor& gb, int P, int xdiv, int N, int K, float limit,
            bool has_limit, bool round) {
  // rows per warp: 4 weight rows in flight per lane (mode 1 reads two matrices), fewer with 8 token columns
  constexpr int R = (MODE == 1 ? 2 : 4) / (MAXT >= 8 ? 2 : 1);
  const dim3 grid(MODE == 0 ? (P + MAXT - 1) / MAXT : P, (N + WARPS * R - 1) / (WARPS * R));
  fp4_rows_kernel<FMT, MODE, R, MAXT, XT, OT><<<grid, WARPS * 32, 0, at::cuda::getCurrentCUDAStream()>>>(
      reinterpret_cast<const XT*>(x.data_ptr()), idx.data_ptr<int64_t>(), wts.data_ptr<float>(),
      reinterpret_cast<OT*>(out.data_ptr()), wa.data_ptr<uint8_t>(), sa.data_ptr<uint8_t>(), ga.data_ptr<float>(),
      wb.data_ptr<uint8_t>(), sb.data_ptr<uint8_t>(), gb.data_ptr<float>(), P, xdiv, N, K, limit, has_limit, round);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <int FMT, int MODE, int MAXT>
void by_dtype(const torch::Tensor& x, const torch::Tensor& idx, const torch::Tensor& wts, torch::Tensor& out,
              const torch::Tensor& wa, const torch::Tensor& sa, const torch::Tensor& ga, const torch::Tensor& wb,
              const torch::Tensor& sb, const torch::Tensor& gb, int P, int xdiv, int N, int K, float limit,
              bool has_limit, bool round) {
  const bool bf = x.scalar_type() == at::kBFloat16;
  if constexpr (MODE == 2) {
    if (bf) launch<FMT, MODE, MAXT, __nv_bfloat16, float>(x, idx, wts, out, wa, sa, ga, wb, sb, gb, P, xdiv, N, K, limit, has_limit, round);
    else launch<FMT, MODE, MAXT, float, float>(x, idx, wts, out, wa, sa, ga, wb, sb, gb, P, xdiv, N, K, limit, has_limit, round);
  } else {
    if (bf) launch<FMT, MODE, MAXT, __nv_bfloat16, __nv_bfloat16>(x, idx, wts, out, wa, sa, ga, wb, sb, gb, P, xdiv, N, K, limit, has_limit, round);
    else launch<FMT, MODE, MAXT, float, float>(x, idx, wts, out, wa, sa, ga, wb, sb, gb, P, xdiv, N, K, limit, has_limit, round);
  }
}

template <int FMT, int MODE>
void by_width(int maxt, const torch::Tensor& x, const torch::Tensor& idx, const torch::Tensor& wts,
              torch::Tensor& out, const torch::Tensor& wa, const torch::Tensor& sa, const torch::Tensor& ga,
              const torch::Tensor& wb, const torch::Tensor& sb, const torch::Tensor& gb, int P, int xdiv, int N,
              int K, float limit, bool has_limit, bool round) {
  if (maxt == 1) by_dtype<FMT, MODE, 1>(x, idx, wts, out, wa, sa, ga, wb, sb, gb, P, xdiv, N, K, limit, has_limit, round);
  else by_dtype<FMT, MODE, 8>(x, idx, wts, out, wa, sa, ga, wb, sb, gb, P, xdiv, N, K, limit, has_limit, round);
}

}  // namespace

// The checks that keep a launch inside its buffers; the Python wrapper has already matched shapes and formats.
void fp4_rows(const torch::Tensor& x, const torch::Tensor& idx, const torch::Tensor& wts, torch::Tensor out,
              const torch::Tensor& wa, const torch::Tensor& sa, const torch::Tensor& ga, const torch::Tensor& wb,
              const torch::Tensor& sb, const torch::Tensor& gb, int64_t P, int64_t xdiv, int64_t N, int64_t K,
              double limit, bool has_limit, int64_t fmt, int64_t mode, bool round, int64_t maxt) {
  TORCH_CHECK(x.is_cuda() && x.is_contiguous(), "fp4_rows: x must be a contiguous CUDA tensor");
  TORCH_CHECK(x.scalar_type() == at::kBFloat16 || x.scalar_type() == at::kFloat, "fp4_rows: x must be bf16 or fp32, found ", x.scalar_type());
  TORCH_CHECK(K % 32 == 0, "fp4_rows: K must be a multiple of 32, found ", K);
  TORCH_CHECK(idx.scalar_type() == at::kLong && wts.scalar_type() == at::kFloat, "fp4_rows: idx int64 and wts fp32 expected");
  for (const auto* t : {&wa, &sa, &wb, &sb})
    TORCH_CHECK(t->scalar_type() == at::kByte && t->is_contiguous(), "fp4_rows: packed data and scales must be contiguous uint8");
  TORCH_CHECK(reinterpret_cast<uintptr_t>(wa.data_ptr()) % 16 == 0 && reinterpret_cast<uintptr_t>(wb.data_ptr()) % 16 == 0,
              "fp4_rows: packed data must be 16-byte aligned");
  TORCH_CHECK(mode >= 0 && mode <= 2 && (fmt == 0 || fmt == 1) && (maxt == 1 || maxt == 8), "fp4_rows: bad mode/fmt/maxt");
  if (P == 0 || N == 0) return;
  const float lim = static_cast<float>(limit);
  const int p = static_cast<int>(P), xd = static_cast<int>(xdiv), n = static_cast<int>(N), k = static_cast<int>(K);
#define FP4_ROWS_CASE(F, M) if (fmt == F && mode == M) by_width<F, M>(static_cast<int>(maxt), x, idx, wts, out, wa, sa, ga, wb, sb, gb, p, xd, n, k, lim, has_limit, round)
  FP4_ROWS_CASE(0, 0); FP4_ROWS_CASE(0, 1); FP4_ROWS_CASE(0, 2);
  FP4_ROWS_CASE(1, 0); FP4_ROWS_CASE(1, 1); FP4_ROWS_CASE(1, 2);
#undef FP4_ROWS_CASE
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("fp4_rows", &fp4_rows, "FP4 weight-only rows kernel (modes: 0 gemv, 1 expert up + SwiGLU, 2 expert down)");
}
