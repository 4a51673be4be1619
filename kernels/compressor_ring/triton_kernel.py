"""The graph-safe decode's compressor state writes in Triton: the token's write into both rings in one launch (two
index_puts before), and a closing block's entry write with the CSA rings' shift in one launch (an index, a where and
an index_put, then a where per ring: five launches, three for HCA). Copies only, so the bits are the references'.

`_ring_write_kernel`: program (row, column block) stores C and Z of its row at the row's slot. `_close_block_kernel`:
program (row, part): part 0 writes c into the row's entry b, parts 1 and 2 move the kv and gate rings' current block
[m, 2m) onto [0, m) (overlap only), each only where the row's block closes (else it writes nothing: the reference's
where writes the old values back, the same bits). Launched on torch's current stream (capturable).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._pdl import pdl, pdl_enter

TILE = 4096                                              # elements per program at most


@triton.jit
def _ring_write_kernel(kv_ptr, g_ptr, c_ptr, z_ptr, slot_ptr, kv_row, g_row, c_row, z_row, W, S,
                       BW: tl.constexpr, PDL: tl.constexpr):
    pdl_enter(PDL)
    r = tl.program_id(0).to(tl.int64)
    col = tl.program_id(1) * BW + tl.arange(0, BW)
    m = col < W
    s = tl.load(slot_ptr + r)
    tl.store(kv_ptr + r * kv_row + s * W + col, tl.load(c_ptr + r * c_row + col, mask=m), mask=m)
    tl.store(g_ptr + r * g_row + s * W + col, tl.load(z_ptr + r * z_row + col, mask=m), mask=m)


@triton.jit
def _shift(base, MW, BM: tl.constexpr):
    for start in range(0, MW, BM):                          # rows [m, 2m) -> [0, m): MW = m * W contiguous values
        col = start + tl.arange(0, BM)
        m = col < MW
        tl.store(base + col, tl.load(base + MW + col, mask=m), mask=m)


@triton.jit
def _close_block_kernel(e_ptr, b_ptr, cl_ptr, c_ptr, kv_ptr, g_ptr, e_row, c_row, kv_row, g_row, D, N, MW,
                        BD: tl.constexpr, BM: tl.constexpr, PDL: tl.constexpr):
    pdl_enter(PDL)
    r = tl.program_id(0).to(tl.int64)
    part = tl.program_id(1)
    if tl.load(cl_ptr + r) != 0:
        if part == 0:
            b = tl.load(b_ptr + r)
            col = tl.arange(0, BD)
            m = col < D
            v = tl.load(c_ptr + r * c_row + col, mask=m)
            tl.store(e_ptr + r * e_row + b * D + col, v.to(e_ptr.dtype.element_ty), mask=m)
        elif part == 1:
            _shift(kv_ptr + r * kv_row, MW, BM)
        else:
            _shift(g_ptr + r * g_row, MW, BM)


def _rows_ok(t: torch.Tensor) -> bool:
    """[n, ...] with each row's trailing dims contiguous (any row stride)."""
    return t[0].is_contiguous() if t.shape[0] else True


def ring_write_triton(kv_state, gate_state, C, Z, rows, slot) -> None:
    n, S, W = kv_state.shape
    if n == 0:
        return
    C2, Z2 = (t if t.stride(-1) == 1 else t.contiguous() for t in (C, Z))
    bw = min(triton.next_power_of_2(W), TILE)
    _ring_write_kernel[(n, triton.cdiv(W, bw))](kv_state, gate_state, C2, Z2, slot.contiguous(), kv_state.stride(0),
                                                gate_state.stride(0), C2.stride(0), Z2.stride(0), W, S, BW=bw,
                                                num_warps=4 if bw >= 1024 else 1, **pdl(kv_state))


def close_block_triton(entries, rows, b, closes, c, kv_state, gate_state, m: int, overlap: bool) -> None:
    n, N, D = entries.shape
    if n == 0:
        return
    c2 = c if c.stride(-1) == 1 else c.contiguous()
    W = kv_state.shape[-1]
    _close_block_kernel[(n, 3 if overlap else 1)](
        entries, b.contiguous(), closes, c2, kv_state, gate_state, entries.stride(0),
        c2.stride(0), kv_state.stride(0), gate_state.stride(0), D, N, m * W, BD=triton.next_power_of_2(D),
        BM=min(TILE, triton.next_power_of_2(m * W)), num_warps=4, **pdl(entries))
