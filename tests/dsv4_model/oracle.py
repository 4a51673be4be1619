"""An independent fp32 implementation of the DSV4 architecture (README, "dsv4_model"), the oracle of the model's decode.

Written from the spec, not from `dsv4_model`: it imports none of the model's code. It reads a checkpoint in the
native naming itself (safetensors, any of plain / FP8 block / MXFP4 formats), parses config.json itself, and
computes the whole sequence at once with masks (a prefill), so it shares neither the model's structure (a
token-by-token decode with ring buffers) nor its helpers. Numerics follow the official reference for the
formats stored: FP8 weights -> FP8 (1x128, power-of-two) activation quantisation; MXFP4 experts -> the same
FP8 activation quantisation x e2m1 weights; the KV FP8 simulation (block 64) and the indexer's Hadamard + FP4
simulation (block 32). When K is not a multiple of 128 (tiny shapes) the FP8 activation block is the row.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import torch
import torch.nn.functional as F

E2M1_GRID = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


# -- config -----------------------------------------------------------------------------------------------
def read_config(path: Path) -> dict:
    raw = json.loads(Path(path).read_text())
    alias = {"hidden_size": "dim", "num_hidden_layers": "n_layers", "num_attention_heads": "n_heads",
             "qk_rope_head_dim": "rope_head_dim", "sliding_window": "window_size", "num_experts_per_tok": "n_activated_experts",
             "moe_intermediate_size": "moe_inter_dim", "routed_scaling_factor": "route_scale", "num_hash_layers": "n_hash_layers",
             "rms_norm_eps": "norm_eps", "scoring_func": "score_func"}
    c = {alias.get(k, k): v for k, v in raw.items()}
    rs = raw.get("rope_scaling") or {}
    c.setdefault("rope_factor", rs.get("factor"))
    c.setdefault("original_seq_len", rs.get("original_max_position_embeddings"))
    c.setdefault("beta_fast", rs.get("beta_fast"))
    c.setdefault("beta_slow", rs.get("beta_slow"))
    return c


# -- formats ----------------------------------------------------------------------------------------------
def e8m0(t: torch.Tensor) -> torch.Tensor:
    b = t.view(torch.uint8).to(torch.int32) if t.dtype in (torch.float8_e8m0fnu, torch.uint8, torch.int8) else None
    return torch.pow(2.0, (b - 127).float()) if b is not None else t.float()


def e2m1_decode(packed: torch.Tensor) -> torch.Tensor:
    b = packed.view(torch.uint8).to(torch.int64)
    grid = torch.tensor(E2M1_GRID + [-g for g in E2M1_GRID])
    codes = torch.stack([b % 16, b // 16], -1).flatten(-2)          # low nibble first
    return grid[codes]


def weight(sd: dict, base: str) -> tuple[torch.Tensor, str]:
    """-> (fp32 weight [out, in], stored format)."""
    w = sd[base + ".weight"]
    if w.dtype == torch.float8_e4m3fn:
        s = e8m0(sd[base + ".scale"])
        out, k = w.shape
        full = s[torch.arange(out) // 128][:, torch.arange(k) // 128]
        return w.float() * full, "fp8"
    if w.dtype in (torch.int8, torch.uint8, torch.float4_e2m1fn_x2):
        v = e2m1_decode(w)
        s = e8m0(sd[base + ".scale"])
        return v * s[:, torch.arange(v.shape[1]) // 32], "mxfp4"
    return w.float(), "plain"


def pow2_ceil(x: torch.Tensor) -> torch.Tensor:
    return torch.pow(2.0, torch.ceil(torch.log2(x)))


def fp8_quant(x: torch.Tensor, block: int) -> torch.Tensor:
    shp = x.shape
    xb = x.reshape(*shp[:-1], shp[-1] // block, block)
    s = pow2_ceil(xb.abs().amax(-1, keepdim=True).clamp_min(1e-4) / 448.0)
    return ((xb / s).clamp(-448, 448).to(torch.float8_e4m3fn).float() * s).reshape(shp)


def fp4_quant(x: torch.Tensor, block: int = 32) -> torch.Tensor:
    shp = x.shape
    xb = x.reshape(*shp[:-1], shp[-1] // block, block)
    s = pow2_ceil(xb.abs().amax(-1, keepdim=True).clamp_min(6 * 2.0 ** -126) / 6.0)
    v = (xb / s).clamp(-6, 6)
    grid = torch.tensor(E2M1_GRID)
    d = (v.abs().unsqueeze(-1) - grid).abs()
    best = d == d.min(-1, keepdim=True).values
    even = torch.tensor([2.0 if i % 2 == 0 else 1.0 for i in range(8)])      # ties to the even mantissa
    mag = grid[(best * even).argmax(-1)]
    return (torch.sign(v) * mag * s).reshape(shp)


# -- pieces -----------------------------------------------------------------------------------------------
def rms(x: torch.Tensor, w: torch.Tensor | None, eps: float) -> torch.Tensor:
    y = x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps)
    return y if w is None else y * w.float()


def freqs(c: dict, compressed: bool) -> torch.Tensor:
    rd = c["rope_head_dim"]
    base = c["compress_rope_theta"] if compressed else c["rope_theta"]
    f = 1.0 / (base ** (torch.arange(0, rd, 2, dtype=torch.float32) / rd))
    orig = c["original_seq_len"] if compressed else 0
    if orig and orig > 0:
        def dim_of(rot):
            return rd * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(base))
        lo, hi = max(math.floor(dim_of(c["beta_fast"])), 0), min(math.ceil(dim_of(c["beta_slow"])), rd - 1)
        if lo == hi:
            hi += 0.001
        ramp = ((torch.arange(rd // 2, dtype=torch.float32) - lo) / (hi - lo)).clamp(0, 1)
        f = f / c["rope_factor"] * ramp + f * (1 - ramp)
    return f


def rope(x: torch.Tensor, pos: torch.Tensor, f: torch.Tensor, inverse: bool = False) -> torch.Tensor:
    """Interleaved pairs on the last rd dims of x [.., rd]; pos broadcast to x's leading dims."""
    ang = pos.float().unsqueeze(-1) * f                                   # [.., rd/2]
    z = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2).contiguous())
    rot = torch.polar(torch.ones_like(ang), -ang if inverse else ang)
    return torch.view_as_real(z * rot).flatten(-2)


def rope_tail(x, pos, f, rd, inverse=False):
    return torch.cat([x[..., :-rd], rope(x[..., -rd:], pos, f, inverse)], -1)


def hadamard(n: int) -> torch.Tensor:
    h = torch.tensor([[1.0]])
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h * n ** -0.5


def hc_pre(X, fn, scale, base, c):
    hc, eps = c["hc_mult"], c["hc_eps"]
    f = X.flatten(-2)
    mix = (f @ fn.T) * torch.rsqrt(f.square().mean(-1, keepdim=True) + c["norm_eps"])
    pre = torch.sigmoid(mix[..., :hc] * scale[0] + base[:hc]) + eps
    post = 2 * torch.sigmoid(mix[..., hc:2 * hc] * scale[1] + base[hc:2 * hc])
    comb = mix[..., 2 * hc:].reshape(*mix.shape[:-1], hc, hc) * scale[2] + base[2 * hc:].reshape(hc, hc)
    comb = torch.softmax(comb, -1) + eps
    comb = comb / (comb.sum(-2, keepdim=True) + eps)
    for _ in range(c["hc_sinkhorn_iters"] - 1):
        comb = comb / (comb.sum(-1, keepdim=True) + eps)
        comb = comb / (comb.sum(-2, keepdim=True) + eps)
    return (pre.unsqueeze(-1) * X).sum(-2), post, comb


def hc_post(y, X, post, comb):
    return post.unsqueeze(-1) * y.unsqueeze(-2) + (comb.unsqueeze(-1) * X.unsqueeze(-2)).sum(-3)


# -- compressor (whole sequence) --------------------------------------------------------------------------
def compress(x, sd, p, ratio, width, c, f, post):
    """Entries of every complete block of x [T, d] -> [T // ratio, width]."""
    T = x.shape[0]
    nb = T // ratio
    if nb == 0:
        return x.new_zeros(0, width)
    kv = (x[: nb * ratio] @ sd[p + ".wkv.weight"].float().T).reshape(nb, ratio, -1)
    sc = (x[: nb * ratio] @ sd[p + ".wgate.weight"].float().T).reshape(nb, ratio, -1) + sd[p + ".ape"].float()
    if ratio == 4:           # overlap: previous block's first half, own block's second half
        prev_kv = torch.cat([kv.new_zeros(1, ratio, width), kv[:-1, :, :width]], 0)
        prev_sc = torch.cat([sc.new_full((1, ratio, width), float("-inf")), sc[:-1, :, :width]], 0)
        kv = torch.cat([prev_kv, kv[:, :, width:]], 1)
        sc = torch.cat([prev_sc, sc[:, :, width:]], 1)
    pooled = (kv * sc.softmax(1)).sum(1)
    e = rms(pooled, sd[p + ".norm.weight"], c["norm_eps"])
    e = rope_tail(e, torch.arange(nb) * ratio, f, c["rope_head_dim"])
    return post(e)


# -- the forward ------------------------------------------------------------------------------------------
class Oracle:
    def __init__(self, root: Path):
        from safetensors.torch import load_file
        self.c = read_config(Path(root) / "config.json")
        self.sd = {}
        for f in sorted(Path(root).glob("*.safetensors")):
            self.sd.update(load_file(str(f)))
        self.max_shared_gate = 0.0      # evidence that the shared expert's gate exceeded the routed clamp
        self._w: dict[str, tuple[torch.Tensor, str]] = {}
        self.min_gap = float("inf")     # smallest relative score gap at the indexer's top-k boundary (ties: 0)

    def lin(self, x: torch.Tensor, base: str) -> torch.Tensor:
        if base not in self._w:
            self._w[base] = weight(self.sd, base)
        w, fmt = self._w[base]
        if fmt != "plain":
            k = x.shape[-1]
            x = fp8_quant(x, 128 if k % 128 == 0 else k)
        return x @ w.T

    def attention(self, x, L, T):
        c, sd, p = self.c, self.sd, f"layers.{L}.attn"
        H, D, rd, W, eps = c["n_heads"], c["head_dim"], c["rope_head_dim"], c["window_size"], c["norm_eps"]
        ratio = c["compress_ratios"][L]
        f = freqs(c, ratio > 0)
        t = torch.arange(T)
        qr = rms(self.lin(x, p + ".wq_a"), sd[p + ".q_norm.weight"], eps)
        q = rms(self.lin(qr, p + ".wq_b").reshape(T, H, D), None, eps)
        q = rope_tail(q, t[:, None], f, rd)
        kv = rope_tail(rms(self.lin(x, p + ".wkv"), sd[p + ".kv_norm.weight"], eps), t, f, rd)
        kv = torch.cat([fp8_quant(kv[:, :-rd], 64), kv[:, -rd:]], -1)
        keys = [kv]
        masks = [(t[None, :] <= t[:, None]) & (t[None, :] > t[:, None] - W)]
        if ratio:
            ent = compress(x, sd, p + ".compressor", ratio, D, c, f,
                           lambda e: torch.cat([fp8_quant(e[:, :-rd], 64), e[:, -rd:]], -1))
            nb = ent.shape[0]
            vis = torch.arange(nb)[None, :] < ((t + 1) // ratio)[:, None]
            if ratio == 4 and nb:
                vis = vis & self.indexer(x, qr, L, T, f, vis)
            keys.append(ent)
            masks.append(vis)
        K = torch.cat(keys, 0)
        mask = torch.cat(masks, 1)
        s = torch.einsum("thd,nd->thn", q, K) * D ** -0.5
        s = s.masked_fill(~mask[:, None, :], float("-inf"))
        sink = sd[p + ".attn_sink"].float()
        m = torch.maximum(s.amax(-1), sink)
        e = torch.exp(s - m[..., None])
        prob = e / (e.sum(-1) + torch.exp(sink - m))[..., None]
        o = torch.einsum("thn,nd->thd", prob, K)
        o = rope_tail(o, t[:, None], f, rd, inverse=True)
        G, R = c["o_groups"], c["o_lora_rank"]
        wa, _ = weight(sd, p + ".wo_a")
        o = torch.einsum("tgi,gri->tgr", o.reshape(T, G, -1), wa.reshape(G, R, -1)).reshape(T, G * R)
        return self.lin(o, p + ".wo_b")

    def indexer(self, x, qr, L, T, f, vis):
        c, sd, p = self.c, self.sd, f"layers.{L}.attn.indexer"
        Hi, Di, rd = c["index_n_heads"], c["index_head_dim"], c["rope_head_dim"]
        had = hadamard(Di)
        t = torch.arange(T)
        k = compress(x, sd, p + ".compressor", 4, Di, c, f, lambda e: fp4_quant(e @ had))
        q = rope_tail(self.lin(qr, p + ".wq_b").reshape(T, Hi, Di), t[:, None], f, rd)
        q = fp4_quant(q @ had)
        w = self.lin(x, p + ".weights_proj") * (Di ** -0.5 * Hi ** -0.5)
        score = (torch.einsum("thd,nd->thn", q, k).relu() * w[..., None]).sum(1)
        score = score.masked_fill(~vis, float("-inf"))
        nb = k.shape[0]
        top = score.topk(min(c["index_topk"] + 1, nb), -1).values
        if top.shape[-1] > c["index_topk"]:       # margin at the selection boundary, where both sides are visible
            a, b = top[:, -2], top[:, -1]
            ok = torch.isfinite(b)
            gap = ((a - b).abs() / a.abs().clamp_min(1e-30)).masked_fill(~ok, float("inf"))
            self.min_gap = min(self.min_gap, float(gap.min()))
        pick = score.topk(min(c["index_topk"], nb), -1).indices
        sel = torch.zeros(T, nb, dtype=torch.bool)
        sel.scatter_(1, pick, True)
        return sel

    def expert(self, x, base, limit):
        g = self.lin(x, base + ".w1")
        u = self.lin(x, base + ".w3")
        if limit:
            g, u = g.clamp(max=limit), u.clamp(-limit, limit)
        return F.silu(g) * u

    def moe(self, x, ids, L):
        c, sd, p = self.c, self.sd, f"layers.{L}.ffn"
        scores = F.softplus(x @ sd[p + ".gate.weight"].float().T).sqrt()
        if L < c["n_hash_layers"]:
            idx = sd[p + ".gate.tid2eid"].long()[ids]
        else:
            idx = (scores + sd[p + ".gate.bias"].float()).topk(c["n_activated_experts"], -1).indices
        wts = scores.gather(-1, idx)
        wts = wts / wts.sum(-1, keepdim=True) * c["route_scale"]
        y = torch.zeros_like(x)
        limit = c["swiglu_limit"]
        for e in range(c["n_routed_experts"]):
            rows, slot = torch.where(idx == e)
            if rows.numel():
                h = wts[rows, slot, None] * self.expert(x[rows], f"{p}.experts.{e}", limit)   # weight before w2
                y.index_add_(0, rows, self.lin(h, f"{p}.experts.{e}.w2"))
        self.max_shared_gate = max(self.max_shared_gate, float(self.lin(x, p + ".shared_experts.w1").max()))
        sh = self.expert(x, p + ".shared_experts", None)            # the official shared expert: no clamp
        return y + self.lin(sh, p + ".shared_experts.w2")

    @torch.no_grad()
    def logits(self, ids) -> torch.Tensor:
        """Teacher-forced fp32 logits [T, vocab] of the token sequence `ids`."""
        c, sd = self.c, self.sd
        ids = torch.as_tensor(ids, dtype=torch.long)
        T = ids.numel()
        X = sd["embed.weight"].float()[ids].unsqueeze(1).repeat(1, c["hc_mult"], 1)    # [T, hc, d]
        for L in range(c["n_layers"]):
            p = f"layers.{L}"
            x, post, comb = hc_pre(X, sd[p + ".hc_attn_fn"].float(), sd[p + ".hc_attn_scale"].float(),
                                   sd[p + ".hc_attn_base"].float(), c)
            X = hc_post(self.attention(rms(x, sd[p + ".attn_norm.weight"], c["norm_eps"]), L, T), X, post, comb)
            x, post, comb = hc_pre(X, sd[p + ".hc_ffn_fn"].float(), sd[p + ".hc_ffn_scale"].float(),
                                   sd[p + ".hc_ffn_base"].float(), c)
            X = hc_post(self.moe(rms(x, sd[p + ".ffn_norm.weight"], c["norm_eps"]), ids, L), X, post, comb)
        f = X.flatten(-2)
        mix = (f @ sd["hc_head_fn"].float().T) * torch.rsqrt(f.square().mean(-1, keepdim=True) + c["norm_eps"])
        pre = torch.sigmoid(mix * sd["hc_head_scale"].float() + sd["hc_head_base"].float()) + c["hc_eps"]
        h = rms((pre.unsqueeze(-1) * X).sum(-2), sd["norm.weight"], c["norm_eps"])
        return h @ sd["head.weight"].float().T
