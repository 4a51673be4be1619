"""RMSNorm, stored-format weight buffers, and the format-faithful Linear shared by every layer."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from dsv4_kernels.rms_norm.reference import rms_norm_ref

from .quant import QWeight, act_sim, dequant, fp8_block, fp8_fake_quant


class RMSNorm(nn.Module):
    """`kernel`: `(x, weight, eps) -> y`, the reference formula, or the one-launch kernel (`use_kernels`)."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim), requires_grad=False)  # fp32, as the reference keeps it
        self.kernel = rms_norm_ref

    def use_kernels(self, table) -> None:
        """This module's kernel slot from a kernel table (`decode.KernelTable`)."""
        self.kernel = table["rms"]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.kernel(x, self.weight, self.eps)


def unweighted_rms(x: torch.Tensor, eps: float) -> torch.Tensor:
    return rms_norm_ref(x, None, eps)


# A QWeight lives in a module as buffers (so `.to(device)` moves it and the state_dict holds it):
# prefix "" -> weight, scale, scale2, input_scale; prefix "w1" -> w1_weight, w1_scale, ...
_PARTS = ("weight", "scale", "scale2", "input_scale")


def _names(prefix: str) -> tuple[str, ...]:
    return tuple(f"{prefix}_{p}" if prefix else p for p in _PARTS)


def init_qweight(module: nn.Module, prefix: str, shape: tuple[int, ...], dtype: torch.dtype) -> None:
    names = _names(prefix)
    module.register_buffer(names[0], torch.zeros(shape, dtype=dtype))
    for n in names[1:]:
        module.register_buffer(n, None)
    module.fmts = {**getattr(module, "fmts", {}), prefix: "plain"}


def get_qweight(module: nn.Module, prefix: str = "") -> QWeight:
    w, s, s2, inp = (getattr(module, n) for n in _names(prefix))
    return QWeight(module.fmts[prefix], w, s, s2, inp)


def set_qweight(module: nn.Module, prefix: str, qw: QWeight) -> None:
    """Replace the stored weight (format, tensors) of `module` in place of its placeholder."""
    for n, t in zip(_names(prefix), (qw.data, qw.scale, qw.scale2, qw.input_scale)):
        module._buffers[n] = t
    module.fmts[prefix] = qw.fmt


def common_block(*linears: "Linear") -> int | None:
    """The per-block FP8 fake quant block every one of `linears` simulates its input with (`Linear.fp8_block`), or
    None where they do not all take the same one."""
    block = linears[0].fp8_block()
    return None if block is None or any(lin.fp8_block() != block for lin in linears[1:]) else block


def shared_sim(x: torch.Tensor, *linears: "Linear") -> tuple[torch.Tensor, bool]:
    """x with the activation simulation that every one of `linears` applies, made once: (simulated x, True) where they
    all take the same per-block FP8 fake quant (`common_block`), else (x, False) and each simulates its own. Pass
    the flag as their `simulated`: the values are each projection's own simulation's, in one launch instead of one
    each."""
    block = common_block(*linears)
    return (x, False) if block is None else (linears[0].fp8_quant(x, block), True)


class Linear(nn.Module):
    """y = act_sim(x) @ dequant(W)^T with W in the format the checkpoint stores (see quant.py).

    `act_sim = False` switches the activation simulation off for A/B runs. `gemv`: a weight-only kernel
    `(x [B, K], weight tuple) -> y [B, N]` for decode-sized inputs (at most 8 rows), or None: the dequantised
    F.linear. `fp8_quant`: the FP8 activation fake quant `(x, block) -> x`, the reference or its one-launch kernel.
    `dense`: the product of the rest `(x, W) -> x @ W^T`, F.linear or a row-invariant one (`rowwise.rows_linear`,
    what the speculative step's batched verify needs). All three are kernel slots (`use_kernels`).
    """

    def __init__(self, in_features: int, out_features: int, dtype=torch.float32):
        super().__init__()
        self.in_features, self.out_features, self.dtype = in_features, out_features, dtype
        self.act_sim = True
        self.gemv = None
        self.fp8_quant = fp8_fake_quant
        self.dense = F.linear
        self.gemv_rows = 8          # the most rows the GEMV takes (any, under a row-invariant table: `use_kernels`)
        init_qweight(self, "", (out_features, in_features), dtype)

    @property
    def fmt(self) -> str:
        return self.fmts[""]

    @property
    def qweight(self) -> QWeight:
        return get_qweight(self, "")

    def use_kernels(self, table) -> None:
        """This module's kernel slots from a kernel table (`decode.KernelTable`): the stored-format GEMV for the
        quantised projections and the fp32 ones (LM head, compressor; cuBLAS ran them at half the bandwidth or less
        for 8 rows), the table's dense product for the rest; the FP8 fake quant."""
        gemv = self.fmt in ("fp8", "mxfp4", "nvfp4") or self.fmt == "plain" and self.dtype == torch.float32
        self.gemv = table["gemv"] if gemv else None
        self.fp8_quant = table["fp8"]
        self.dense = table["dense"]
        # a row-invariant table (the batched verify's, decode_kernels(rowwise=True)): the plain step's n rows and
        # the verify's n*(k+1) take the same product, so the GEMV at every row count, never F.linear past 8 rows
        self.gemv_rows = 1 << 62 if table.rowwise else 8

    def fp8_block(self) -> int | None:
        """The block of this projection's activation simulation where that is the per-block FP8 fake quant alone
        (an FP8 or MXFP4 weight, simulation on), which a caller may apply itself (a fused op's epilogue, or once
        for two projections of one input) and pass with `simulated=True`; None where it simulates nothing or
        something else."""
        return fp8_block(self.in_features) if self.act_sim and self.fmt in ("fp8", "mxfp4") else None

    def forward(self, x: torch.Tensor, simulated: bool = False) -> torch.Tensor:
        """`simulated`: x already carries this projection's activation simulation (see `fp8_block`)."""
        return self.product(x, self.qweight, simulated)

    def product(self, x: torch.Tensor, qw: QWeight, simulated: bool = False) -> torch.Tensor:
        """x [.., in] -> [.., rows of qw]: this projection's simulation and product slots over the weight qw, its own
        (`forward`) or the row blocks of several projections of one input joined (`Joined`)."""
        if self.act_sim and not simulated:
            x = act_sim(x, qw.fmt, qw.input_scale, self.fp8_quant)
        x = x.to(self.dtype)
        rows = x.numel() // self.in_features if self.in_features else 0
        # decode rows: read the stored bytes. A plain weight held narrower than the product (bf16 as stored, fp32
        # compute) up to 64 rows too (decode buckets past 8): the fallback would widen a copy of it every step
        if self.gemv is not None and (rows <= self.gemv_rows or qw.fmt == "plain" and qw.data.dtype != self.dtype
                                      and rows <= 64):
            return self.gemv(x.reshape(-1, self.in_features), qw.astuple()).view(*x.shape[:-1], qw.shape[-2])
        return self.dense(x, dequant(qw, dtype=self.dtype))

    def extra_repr(self) -> str:
        return f"{self.in_features}->{self.out_features}, fmt={self.fmt}"


def join_weights(linears: list[Linear]) -> QWeight | None:
    """The stored weights of `linears` (one input width) as the row blocks of one weight, in order: each projection's
    buffers become views of its block (no second copy; the state dict unchanged). Plain weights of one dtype, or FP8
    ones whose blocks but the last are whole 128-row scale blocks (the scales then stack as the rows do). None,
    changing nothing, where they are not (another format, a per-tensor scale, not loaded)."""
    qws = [lin.qweight for lin in linears]
    fmt, first = qws[0].fmt, qws[0].data
    if fmt not in ("plain", "fp8") or any(
            q.fmt != fmt or q.data.dtype != first.dtype or q.data.device != first.device or q.data.is_meta
            or q.data.dim() != 2 or q.data.shape[1] != first.shape[1] or q.scale2 is not None
            or q.input_scale is not None or (fmt == "fp8") != (q.scale is not None) for q in qws):
        return None
    if fmt == "fp8" and any(q.data.shape[0] % 128 for q in qws[:-1]):
        return None
    joint = QWeight(fmt, torch.cat([q.data for q in qws]),
                    torch.cat([q.scale for q in qws]) if fmt == "fp8" else None)
    at = at_s = 0
    for lin, q in zip(linears, qws):
        n, n_s = q.data.shape[0], 0 if q.scale is None else q.scale.shape[0]
        set_qweight(lin, "", QWeight(fmt, joint.data[at:at + n],
                                     None if joint.scale is None else joint.scale[at_s:at_s + n_s]))
        at, at_s = at + n, at_s + n_s
    return joint


def still_joined(joint: QWeight, linears: list[Linear]) -> bool:
    """Whether the projections' weights are still the views `join_weights` made of `joint`, in order. A weight
    replaced since (a checkpoint tensor set anew, another format, a move to another device: each buffer moves on its
    own) is not, and the joined copy holds its old values: a product over it would read stale weights. Host checks
    only (pointers and offsets), so they run under capture too."""
    ends = {"data": joint.data.storage_offset(), "scale": None if joint.scale is None else joint.scale.storage_offset()}
    for lin in linears:
        qw = lin.qweight
        if qw.fmt != joint.fmt or (qw.scale is None) != (joint.scale is None):
            return False
        for part, mine in (("data", qw.data), ("scale", qw.scale)):
            whole = getattr(joint, part)
            if whole is None:
                continue
            if mine.dtype != whole.dtype or mine.device != whole.device or not mine.is_contiguous() or \
                    mine.untyped_storage().data_ptr() != whole.untyped_storage().data_ptr() or \
                    mine.storage_offset() != ends[part]:
                return False
            ends[part] += mine.numel()
    return all(end is None or end == getattr(joint, part).storage_offset() + getattr(joint, part).numel()
               for part, end in ends.items())


# Whether `Joined` joins under a CUDA table (the decode on the H100, a layer apart -> joined: run 72 0.2612 -> 0.2532
# ms at B=1, run 73 0.5405 -> 0.5208 at B=8; A/B: decode.py --knob dsv4_model.linear.JOIN_PROJECTIONS=False)
JOIN_PROJECTIONS = True


class Joined:
    """Projections of one input, named attributes of an owner module, read as one product: under a kernel table with
    the stored-format GEMV on CUDA (`use_kernels`), their weights joined (`join_weights`) and one GEMV launch over
    them, where each was a narrow launch of its own (at decode sizes a GEMV of a few MB runs at a fraction of copy
    bandwidth: too few rows in flight per SM). Both decodes call the owner's same code, so they keep taking the
    same product. Not a module: the projections stay the owner's, with its state dict; looked up by name at each
    call, so a projection replaced since the join is read as it now is."""

    def __init__(self, *names: str):
        self.names, self.weight = names, None

    def linears(self, owner: nn.Module) -> list[Linear]:
        return [getattr(owner, n) for n in self.names]

    def use_kernels(self, owner: nn.Module, table) -> None:
        """Join under a CUDA table with a GEMV (and JOIN_PROJECTIONS), where the projections simulate their input
        alike; elsewhere each projection's own product again (its weight stays a view of the joined one)."""
        linears = self.linears(owner)
        self.weight = join_weights(linears) if JOIN_PROJECTIONS and table.cuda and table["gemv"] is not None \
            and _alike(linears) else None

    def __call__(self, owner: nn.Module, x: torch.Tensor, simulated: bool = False) -> list[torch.Tensor]:
        """x [.., in] -> each projection's output [.., out] (views of one product's columns where joined)."""
        linears = self.linears(owner)
        if self.weight is not None and not (still_joined(self.weight, linears) and _alike(linears)):
            self.weight = None              # a weight replaced since the join: its own product, not the stale copy
        if self.weight is None:
            return [lin(x, simulated) for lin in linears]
        return list(linears[0].product(x, self.weight, simulated).split([lin.out_features for lin in linears], -1))


def _alike(linears: list[Linear]) -> bool:
    """Whether one product stands for each of them: the same input width, product dtype, simulation and slots."""
    first = linears[0]
    return all(lin.in_features == first.in_features and lin.dtype == first.dtype and lin.act_sim == first.act_sim
               and lin.fp8_block() == first.fp8_block() and lin.gemv is first.gemv and lin.dense is first.dense
               and lin.fp8_quant is first.fp8_quant and lin.gemv_rows == first.gemv_rows for lin in linears)
