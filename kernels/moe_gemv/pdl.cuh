// Programmatic dependent launch for the CUDA C++ kernels (the Python side's `dsv4_kernels._pdl` explains the
// scheme): each kernel's first statement is `pdl_enter()` (let the next grid launch, then wait for the grids this
// one depends on, before any load or store: the same values as without PDL), and the host launches it with the
// programmatic-serialization attribute when the op was called with `pdl` (`PdlScope`, set by the op for its launches);
// a weight-streaming kernel passes `pdl_prefetch()` as its `pf` (prefetch only when launched early).
#pragma once
#include <cuda_runtime.h>
#include <c10/cuda/CUDAException.h>

__device__ __forceinline__ void pdl_enter() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// The same, for a kernel that streams weights: between the two, the block has the L2 fetch its weights (`rows`
// ranges of `row_bytes` bytes, `stride` bytes apart from `w`; `pf` false: none). Weights are written by no kernel
// of the decode and a prefetch only fills the L2, where every write lands, so this reads nothing stale; launched
// early under PDL, the block streams its weights while the kernel before it still runs, instead of after it.
__device__ __forceinline__ void pdl_enter(bool pf, const void* w, int rows, int64_t stride, int64_t row_bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  if (pf) {
    const char* p = static_cast<const char*>(w);
    const int64_t lines = (row_bytes + 127) / 128;
    for (int64_t i = threadIdx.x; i < rows * lines; i += blockDim.x)
      asm volatile("prefetch.global.L2 [%0];" :: "l"(p + (i / lines) * stride + (i % lines) * 128));
  }
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Whether the launches of the op being called take the attribute: set for the op's duration (launches are made on
// the calling thread; a thread-local, so two threads launching at once do not see each other's choice).
// 0: plain launches; 1: PDL; 2: PDL, the weight-streaming kernels prefetching their weights before the wait
inline int& pdl_mode() {
  static thread_local int mode = 0;
  return mode;
}
inline bool pdl_launches() { return pdl_mode() > 0; }
inline bool pdl_prefetch() { return pdl_mode() == 2; }

struct PdlScope {
  int was;
  explicit PdlScope(int64_t mode) : was(pdl_mode()) { pdl_mode() = static_cast<int>(mode); }
  ~PdlScope() { pdl_mode() = was; }
};

// kernel<<<grid, block, smem, stream>>>(args...), with PDL when the op asked for it, and any further attribute
// (`extra`: a thread-block cluster) first.
template <typename... KArgs, typename... Args>
void pdl_launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                const cudaLaunchAttribute* extra, int n_extra, Args... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[2];
  int n = 0;
  for (int i = 0; i < n_extra; ++i) attr[n++] = extra[i];
  if (pdl_launches()) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  cfg.attrs = attr;
  cfg.numAttrs = n;
  C10_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, static_cast<KArgs>(args)...));
}
