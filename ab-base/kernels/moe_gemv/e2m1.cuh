// FP4 (e2m1) codes to fp16 numbers, shared by cuda_kernel.cu and mma_kernel.cu. Plain C++ where nvcc is not
// compiling device code, so that a CPU test checks it on every 32-bit word (tests/kernels/test_kernels.py).
#pragma once
#include <cstdint>

#ifndef __CUDACC__
#define __host__
#define __device__
#define __forceinline__ inline
#endif

// (a & M) | (b & ~M) in one LOP3: nvcc splits the C expression into two
template <uint32_t M>
static __host__ __device__ __forceinline__ uint32_t bit_select(uint32_t a, uint32_t b) {
#ifdef __CUDA_ARCH__
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xE4;\n" : "=r"(d) : "r"(a), "r"(b), "n"(M));
  return d;
#else
  return (a & M) | (b & ~M);
#endif
}

// The four pairs of a packed word (8 codes, code j in bits 4j..4j+3): pair i is codes i and i+4 as fp16x2
// e2m1 * 2^-14 (magnitude at bits 9-11, sign at 15 of each half; exact: code 1 is the fp16 subnormal 2^-15).
// The sign has to move 3 bits further than the magnitude, so each byte is first respread: ev keeps its even
// code's magnitude at bits 0-2 and puts its sign at bit 6, od puts its odd code's magnitude at bits 1-3 under
// its sign at bit 7 (their other bits are don't-care, masked off below). Then a shift and a mask per pair: 11
// integer instructions a word, where a shift per field took 16 (the one-token tensor-core loop is bound by
// instruction issue as much as by memory: Nsight Compute, BENCHMARKS.md).
static __host__ __device__ __forceinline__ void e2m1_pairs(uint32_t q, uint32_t (&p)[4]) {
  const uint32_t ev = bit_select<0x07070707u>(q, q << 3);
  const uint32_t od = bit_select<0x0E0E0E0Eu>(q >> 3, q);
  p[0] = (ev << 9) & 0x8E008E00u;
  p[1] = (od << 8) & 0x8E008E00u;
  p[2] = (ev << 1) & 0x8E008E00u;
  p[3] = od & 0x8E008E00u;
}
