// Shared by cuda_kernel.cu and mma_kernel.cu (two translation units of one extension).
#pragma once
#include <cstdint>
#include <vector_types.h>

// A 16-byte load of streamed data (weights, read once): not kept in L1, where it would push out what is reused
// (x, the scales).
static __device__ __forceinline__ uint4 ld_stream(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
