// Shared by cuda_kernel.cu and mma_kernel.cu (two translation units of one extension).
#pragma once
#include <cstdint>
#include <vector_types.h>

// A 16-byte load of streamed data (weights, read once): not kept in L1, where it would push out what is reused
// (x, the scales). WIDE asks the L2 to fetch the 256 bytes around the address (`.L2::256B`) for loops whose
// warps each read 64 bytes of a row that the block's other warps read next to (the one-token tensor-core loop:
// 8 warps, 512 contiguous bytes of each row an iteration): on the H200 that loop ran 2-4 % faster with it
// (2026-12-05 runs 36-37), the rows kernel, whose warps read whole lines, no faster.
template <bool WIDE = false>
static __device__ __forceinline__ uint4 ld_stream(const void* p) {
  uint4 v;
  if constexpr (WIDE)
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  else
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
