"""compressor_ring: the graph-safe decode's compressor state writes (`dsv4_model.decode.compressor_fold`), copies in
one Triton launch each on CUDA (``triton_kernel.py``; the references' bits), the PyTorch references
(``reference.py``: the ops the step ran) elsewhere.

    ring_write(kv_state [n, S, W], gate_state [n, S, W], C [n, W], Z [n, W], rows [n], slot [n])   (in place)
    close_block(entries [n, N, D], rows [n], b [n], closes [n, 1] bool, c [n, D], kv_state, gate_state, m, overlap)
                                                                                                      (in place)

`rows` is arange(n) (the step's rows, in order); slot, b and closes come from the step's positions
(`decode.StepIndex.blocks`). Each row's trailing dims must be contiguous (the decode's state slices are). Shapes are
checked with host integers only (capturable).
"""
from __future__ import annotations

import torch

from .._record import Kernel, Op
from .reference import close_block_ref, ring_write_ref  # noqa: F401


def _row_contiguous(t: torch.Tensor) -> bool:
    return t.shape[0] == 0 or t[0].is_contiguous()


def _contiguous_rows(name: str, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor | None = None) -> None:
    if not (_row_contiguous(a) and _row_contiguous(b) and (c is None or _row_contiguous(c))):
        raise ValueError(f"{name}: the state tensors {tuple(a.shape)}, {tuple(b.shape)}"
                         f"{'' if c is None else ', ' + str(tuple(c.shape))}: each row's trailing dims must be "
                         "contiguous (a slice of rows of a contiguous buffer)")


def ring_write(kv_state: torch.Tensor, gate_state: torch.Tensor, C: torch.Tensor, Z: torch.Tensor, rows: torch.Tensor,
               slot: torch.Tensor) -> None:
    n, S, W = kv_state.shape
    if tuple(gate_state.shape) != (n, S, W) or tuple(C.shape) != (n, W) or tuple(Z.shape) != (n, W) or \
            tuple(slot.shape) != (n,) or tuple(rows.shape) != (n,):
        raise ValueError(f"ring_write: kv_state {tuple(kv_state.shape)}, gate_state {tuple(gate_state.shape)}, C "
                         f"{tuple(C.shape)}, Z {tuple(Z.shape)}, rows {tuple(rows.shape)}, slot {tuple(slot.shape)}: "
                         "expected states [n, S, W], C and Z [n, W], rows and slot [n]")
    _contiguous_rows("ring_write", kv_state, gate_state)
    if kv_state.is_cuda and KERNEL.available()[0]:
        from .triton_kernel import ring_write_triton
        return ring_write_triton(kv_state, gate_state, C, Z, rows, slot)
    return ring_write_ref(kv_state, gate_state, C, Z, rows, slot)


def close_block(entries: torch.Tensor, rows: torch.Tensor, b: torch.Tensor, closes: torch.Tensor, c: torch.Tensor,
                kv_state: torch.Tensor, gate_state: torch.Tensor, m: int, overlap: bool) -> None:
    n, N, D = entries.shape
    if tuple(b.shape) != (n,) or tuple(closes.shape) != (n, 1) or closes.dtype != torch.bool or \
            tuple(c.shape) != (n, D) or overlap and (kv_state.shape[0] != n or kv_state.shape[1] != 2 * m
                                                      or gate_state.shape != kv_state.shape):
        raise ValueError(f"close_block: entries {tuple(entries.shape)}, b {tuple(b.shape)}, closes "
                         f"{tuple(closes.shape)} {closes.dtype}, c {tuple(c.shape)}, states {tuple(kv_state.shape)} / "
                         f"{tuple(gate_state.shape)}, m {m}: expected b [n], closes [n, 1] bool, c [n, D] and with "
                         "overlap states [n, 2m, W]")
    _contiguous_rows("close_block", kv_state, gate_state, entries)
    if entries.is_cuda and KERNEL.available()[0]:
        from .triton_kernel import close_block_triton
        return close_block_triton(entries, rows, b, closes.contiguous(), c, kv_state, gate_state, m, overlap)
    return close_block_ref(entries, rows, b, closes, c, kv_state, gate_state, m, overlap)


KERNEL = Kernel(ops=(
    Op("ring_write", ring_write, ring_write_ref, targets=("ring_write",), parity=("test_compressor_ring_parity",),
       decode=("ring_write", "compressor ring write")),
    Op("close_block", close_block, close_block_ref, targets=("close_block",), parity=("test_compressor_ring_parity",),
       decode=("close_block", "compressor block close")),
))
