// dequantize_nvfp4_kvcache: row m holds N values as N/2 packed e2m1 bytes (low nibble first), N/16 e4m3 block
// scales and one fp32 global scale. One thread per byte writes two outputs. Sizes are checked on the host
// (kernels/nvfp4_kvcache/__init__.py) before this runs; the kernel trusts M and N and never reads past them.
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

__constant__ float kE2M1[16] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f, -0.f, -0.5f, -1.f, -1.5f, -2.f, -3.f, -4.f, -6.f};

template <typename T> __device__ __forceinline__ T cast_out(float v);
template <> __device__ __forceinline__ float cast_out<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 cast_out<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

template <typename T>
__global__ void dequant_kernel(const uint8_t* __restrict__ fp4, const uint8_t* __restrict__ sf,
                               const float* __restrict__ gs, T* __restrict__ out, int64_t M, int64_t N) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;   // byte index
  int64_t half = N / 2;
  if (i >= M * half) return;
  int64_t m = i / half;
  int64_t col = (i % half) * 2;
  __nv_fp8_e4m3 s;
  s.__x = sf[m * (N / 16) + col / 16];
  float scale = float(s), g = gs[m];
  uint8_t b = fp4[i];
  // (value * block scale) * row scale: the reference's order, so fp32 results are bit-identical
  out[m * N + col] = cast_out<T>((kE2M1[b & 0xF] * scale) * g);
  out[m * N + col + 1] = cast_out<T>((kE2M1[b >> 4] * scale) * g);
}

torch::Tensor dequant_cuda(torch::Tensor fp4, torch::Tensor sf, torch::Tensor gs, int64_t M, int64_t N, bool bf16) {
  TORCH_CHECK(fp4.is_cuda() && sf.is_cuda() && gs.is_cuda(), "dequantize_nvfp4_kvcache: inputs must be CUDA tensors");
  TORCH_CHECK(N > 0 && N % 16 == 0 && M > 0, "dequantize_nvfp4_kvcache: need M > 0 and N a multiple of 16, got M=", M, " N=", N);
  TORCH_CHECK(fp4.numel() >= M * (N / 2) && sf.numel() >= M * (N / 16) && gs.numel() >= M,
              "dequantize_nvfp4_kvcache: buffers too small for M=", M, " N=", N);
  TORCH_CHECK(fp4.is_contiguous() && sf.is_contiguous() && gs.is_contiguous(), "dequantize_nvfp4_kvcache: inputs must be contiguous");
  const c10::cuda::CUDAGuard guard(fp4.device());
  auto out = torch::empty({M, N}, fp4.options().dtype(bf16 ? at::kBFloat16 : at::kFloat));
  int64_t total = M * (N / 2);
  int threads = 256;
  int64_t blocks = (total + threads - 1) / threads;
  auto stream = at::cuda::getCurrentCUDAStream();
  const uint8_t* sfp = reinterpret_cast<const uint8_t*>(sf.data_ptr());
  if (bf16) {
    dequant_kernel<__nv_bfloat16><<<blocks, threads, 0, stream>>>(fp4.data_ptr<uint8_t>(), sfp, gs.data_ptr<float>(),
        reinterpret_cast<__nv_bfloat16*>(out.data_ptr()), M, N);
  } else {
    dequant_kernel<float><<<blocks, threads, 0, stream>>>(fp4.data_ptr<uint8_t>(), sfp, gs.data_ptr<float>(),
        out.data_ptr<float>(), M, N);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("dequantize", &dequant_cuda, "NVFP4 KV-cache dequant (e2m1 + e4m3 per 16 + fp32 per row)");
}
