// compressor_reduce: out[n, d] = sum_s softmax_s(gate[n, s, d] + bias[s, d]) * kv[n, s, d], fp32.
// The position bias enters the softmax logits only; the KV content is pooled as it is.
// One thread per (n, d): consecutive threads read consecutive d, so every load of a slot is coalesced.
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

__global__ void compressor_reduce_kernel(const float* __restrict__ kv, const float* __restrict__ gate,
                                         const float* __restrict__ bias, float* __restrict__ out,
                                         int64_t N, int S, int D) {
  int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= N * D) return;
  int64_t n = idx / D;
  int d = (int)(idx % D);
  const float* g = gate + n * S * D + d;
  const float* v = kv + n * S * D + d;
  const float* b = bias + d;
  float m = -INFINITY;
  for (int s = 0; s < S; ++s) m = fmaxf(m, g[(int64_t)s * D] + b[(int64_t)s * D]);
  float denom = 0.f, acc = 0.f;
  if (m == -INFINITY) {  // every slot empty (-inf logits): nothing to pool
    out[idx] = 0.f;
    return;
  }
  for (int s = 0; s < S; ++s) {
    float w = expf(g[(int64_t)s * D] + b[(int64_t)s * D] - m);
    denom += w;
    acc = fmaf(w, v[(int64_t)s * D], acc);
  }
  out[idx] = acc / denom;
}

torch::Tensor compressor_reduce_cuda(torch::Tensor kv, torch::Tensor gate, torch::Tensor bias) {
  TORCH_CHECK(kv.is_cuda() && gate.is_cuda() && bias.is_cuda(), "compressor_reduce: kv, gate and bias must be CUDA tensors");
  TORCH_CHECK(kv.dim() == 3 && gate.sizes() == kv.sizes(), "compressor_reduce: kv and gate must both be [N, S, D]");
  TORCH_CHECK(bias.dim() == 2 && bias.size(0) == kv.size(1) && bias.size(1) == kv.size(2),
              "compressor_reduce: bias must be [S, D] = [", kv.size(1), ", ", kv.size(2), "], found ", bias.sizes());
  TORCH_CHECK(kv.scalar_type() == at::kFloat && gate.scalar_type() == at::kFloat && bias.scalar_type() == at::kFloat,
              "compressor_reduce: expected float32 kv, gate and bias");
  TORCH_CHECK(kv.is_contiguous() && gate.is_contiguous() && bias.is_contiguous(), "compressor_reduce: inputs must be contiguous");
  const c10::cuda::CUDAGuard guard(kv.device());
  int64_t N = kv.size(0);
  int S = (int)kv.size(1), D = (int)kv.size(2);
  auto out = torch::empty({N, D}, kv.options());
  int64_t total = N * D;
  if (total == 0) return out;
  int threads = 256;
  int64_t blocks = (total + threads - 1) / threads;
  // the current stream: a launch on stream 0 during capture would leave the graph empty
  compressor_reduce_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
      kv.data_ptr<float>(), gate.data_ptr<float>(), bias.data_ptr<float>(), out.data_ptr<float>(), N, S, D);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("compressor_reduce", &compressor_reduce_cuda, "CSA/HCA compressor softmax-weighted reduction (fp32)");
}
