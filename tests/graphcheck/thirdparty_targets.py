"""graphcheck targets built from code nobody here wrote: tiny models from installed HF transformers (configs only,
no hub downloads) and a gpt-fast-style decoder, each with the verdict a real CUDA capture gives and why.

Each factory takes `device` and returns a `graphcheck.Target`. `EXPECTED[name]` is the verdict ("safe": graphcheck
must report nothing; "unsafe": it must report at least the listed rules), justified from the third-party source
(transformers 5.17.0; line numbers are that version's). `benchmarks/thirdparty_verdicts.py` runs them all.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from graphcheck import Target

TRANSFORMERS_VERSION = "5.17.0"
VOCAB, B = 96, 2


@dataclass(frozen=True)
class Expect:
    verdict: str                  # "safe" | "unsafe"
    rules: tuple[str, ...]        # rules an unsafe verdict must include
    why: str


EXPECTED: dict[str, Expect] = {
    "hf_llama_static": Expect("safe", (), "StaticCache writes fixed-capacity buffers in place "
                              "(cache_utils.StaticLayer.update: `index_copy_` at `arange(kv_length, device=...) + "
                              "cumulative_length`, a device counter advanced with `add_`), positions come from that "
                              "counter, the mask covers max_cache_len: same ops and shapes every step, no readback."),
    "hf_llama_dynamic": Expect("unsafe", ("GC005",), "DynamicLayer.update rebinds `self.keys = torch.cat([self.keys, "
                               "key_states], dim=-2)`: every step allocates a longer cache, so the captured graph "
                               "writes into buffers the model no longer reads and its shapes grow."),
    "hf_llama_dynamic_rope": Expect("unsafe", ("GC104",), "modeling_rope_utils.dynamic_frequency_update computes "
                                    "`seq_len = torch.max(position_ids) + 1` and branches `if seq_len > "
                                    "self.max_seq_len_cached` on the host: a device readback every step (capture "
                                    "fails with 'operation not permitted when stream is capturing')."),
    "hf_sampling": Expect("safe", (), "Temperature/TopK/TopP warpers are pure tensor ops (topk, sort, cumsum, scatter, "
                          "masked_fill with fixed shapes); torch.multinomial draws on the device generator, which "
                          "capture registers and replay advances: equal generator states give equal tokens."),
    "hf_suppress_tokens_once": Expect("safe", (), "SuppressTokensLogitsProcessor built once with device=...: per step "
                                      "only `torch.arange(V, device=scores.device)`, `isin`, 3-arg `where`."),
    "hf_suppress_tokens_per_step": Expect("unsafe", ("GC401", "GC402"), "the processor built inside the step runs "
                                          "`torch.tensor(list(suppress_tokens), device='cpu')` (logits_process.py:1899)"
                                          " and `self.suppress_tokens.to(scores.device)` (:1904): a pageable "
                                          "host-to-device copy every step, which capture refuses."),
    "hf_suppress_tokens_default_device": Expect(
        "unsafe", ("GC402", "GC001"),
        "the processor is built once, before the step, as `SuppressTokensLogitsProcessor(ids)`: its `device: str = "
        "\"cpu\"` default keeps `torch.tensor(list(suppress_tokens), device=device)` on the host (logits_process.py"
        ":1898-1899), and every call moves it with `self.suppress_tokens.to(scores.device)` (:1904): a pageable "
        "host-to-device copy per step, which a capture refuses."),
    "hf_mixtral_moe_eager": Expect("unsafe", ("GC301",), "MixtralExperts.forward (eager experts) runs "
                                   "`torch.greater(expert_mask.sum(...), 0).nonzero()` and loops over the hit experts "
                                   "with `torch.where(expert_mask[i])`: data-dependent shapes and a host loop."),
    "hf_mixtral_moe_batched": Expect("safe", (), "integrations/moe.batched_mm_experts_forward gathers every token's "
                                     "k expert weights by device index (`gate_up_proj[expert_ids]`) and sums with a "
                                     "fixed reshape: fixed shapes, no readback."),
    "hf_deepseek_v3_moe_grouped_fp32": Expect(
        "unsafe", ("GC103", "GC001"),
        "DeepseekV3TopkRouter.forward (modeling_deepseek_v3.py:144-169: topk over groups, `group_mask.scatter_`, "
        "masked_fill) and integrations/moe.grouped_mm_experts_forward (sort :393, `torch.histc` with a given range "
        ":402, cumsum) keep fixed shapes, but the experts run `torch.nn.functional.grouped_mm` (moe.py:332) in "
        "fp32: ATen's `_grouped_mm_cuda` takes its CUTLASS kernel only for bf16 on sm90/sm100 and otherwise "
        "`_grouped_mm_fallback` (GroupedMMUtils.h), whose `offs.value().cpu()` copies the offsets to the host every"
        " call: capture fails there."),
    "hf_deepseek_v3_moe_grouped_bf16": Expect(
        "safe", (),
        "the same block in bf16: `_grouped_mm_cuda` takes `bf16bf16_grouped_mm` on sm90/sm100 ('fast path, no d2h "
        "sync needed'), which reads the offsets on the device; the router and the sort/histc/cumsum around it are "
        "fixed-shape device ops (moe.py:393-403)."),
    "hf_mistral_swa_filling": Expect(
        "unsafe", ("GC003",),
        "StaticSlidingWindowLayer keeps a Python int `cumulative_length_int`, and get_seq_length returns it "
        "(cache_utils.py:626); MistralModel.forward builds `position_ids = torch.arange(...) + past_seen_tokens` "
        "from it (modeling_mistral.py:360-361). Nothing syncs and the writes are in place at the device "
        "`cumulative_length`, but capture bakes the position: every replay rotates q/k for the captured step's "
        "position while the cache row advances."),
    "hf_mistral_swa_full": Expect(
        "unsafe", ("GC401", "GC001"),
        "once the window is full, StaticSlidingWindowLayer.update rolls the cache and indexes with "
        "`torch.tensor([-1], dtype=int, device=self.device)` (cache_utils.py:559): a pageable host-to-device copy "
        "every step, which a capture refuses; the position (:626) and the mask's `kv_offset` (:611) are host ints "
        "too."),
    "hf_penalties_and_stopping": Expect(
        "safe", (),
        "RepetitionPenaltyLogitsProcessor is gather/where/scatter over input_ids (logits_process.py:409-412); "
        "NoRepeatNGramLogitsProcessor is vectorised in 5.17 (unfold, compare, 3-arg where, `banned_mask.scatter_`, "
        ":1131-1138: no `.tolist()` any more); MinPLogitsWarper is softmax/amax/topk/scatter_/masked_fill "
        "(:762-777). MaxLengthCriteria compares the host length `input_ids.shape[1]` and fills on the device "
        "(stopping_criteria.py:90, a constant at a fixed shape); EosTokenCriteria moves its ids to the device once "
        "and rebinds them (:590, a no-op after warm-up), then `torch.isin(...).any(-1)` (:591). The host read is "
        "generate()'s own `unfinished_sequences.max() == 0`, not here."),
    "hf_encoder_no_repeat_ngram": Expect(
        "unsafe", ("GC102",),
        "EncoderNoRepeatNGramLogitsProcessor still uses the host n-gram dict: per hypothesis "
        "`_get_generated_ngrams` reads the last tokens with `tuple(prev_input_ids[...].tolist())` "
        "(logits_process.py:1069) and bans with a Python list index `scores_processed[i, banned_tokens] = -inf` "
        "(:1206)."),
    "gptfast_greedy": Expect("safe", (), "gpt-fast decode: KV cache written with index_put_ at a device input_pos, "
                             "mask rows gathered by device index, argmax: nothing leaves the device."),
    "gptfast_sampling": Expect("safe", (), "gpt-fast sampling: topk pivot + 3-arg where + softmax, then "
                               "`argmax(probs / exponential_())` on the device generator (no multinomial sync)."),
    "gptfast_host_pos": Expect("unsafe", ("GC003",), "the position kept as a Python int and written "
                               "with `pos.fill_(host_pos)` every step: a capture bakes the int it saw, so every "
                               "replay writes the same cache row and attends to the same prefix (no sync to see)."),
    "gptfast_dev_variable": Expect(
        "safe", (), "the gpt-fast decode built on `DEV = \"cuda\" if torch.cuda.is_available() else \"cpu\"` (the "
        "factory ignores its device argument), whose step builds the causal row as `torch.arange(max_seq, device=DEV)"
        " <= pos`: made on the device on every machine, compared with the device position, nothing crosses."),
    "mamba_functional_cache": Expect(
        "unsafe", ("GC005",),
        "the step binds `conv_state = torch.cat([conv_state[:, :, 1:], x[:, :, None]], -1)` and `ssm_state = "
        "ssm_state * dA + ...` to new tensors, where the reference kernels write the cache in place (HF "
        "models/mamba/modeling_mamba.py causal_conv1d_update :72 `conv_state.copy_(...)`, "
        "mamba_selective_state_update :158 `state.copy_(...)`): a captured graph keeps writing the buffers it "
        "captured, which the next step no longer reads."),
    "hf_speculative_sampling": Expect(
        "unsafe", ("GC001", "GC402", "GC104"),
        "generation/utils.py _speculative_sampling indexes the device probabilities with `torch.arange("
        "candidate_length)` made without a device (:4175, :4177): ATen's index moves a CPU index to self's device "
        "(TensorAdvancedIndexing.cpp make_info), a pageable copy that capture refuses; then `if n_matches < gamma` "
        "(:4202) and `if n_matches > 0` (:4219) read the accepted count back, and the output's length follows it "
        "(`new_candidate_input_ids[:, :n_matches]`, :4220)."),
}
# Targets whose CPU capture must give the same JSON in every process (they sample, or rebind their state: what
# made the rows move before the emulation held its state tensors and fixed its generators' seed).
DETERMINISTIC = ("mamba_functional_cache", "hf_speculative_sampling")


# ---------------------------------------------------------------- HF transformers

def _llama_config(**kw):
    from transformers import LlamaConfig
    cfg = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=False)
    cfg.update(kw)
    c = LlamaConfig(**cfg)
    c._attn_implementation = "sdpa"
    return c


def _cached_decode(model, kv, device: str, name: str) -> Target:
    """One decode token of a transformers causal LM through its cache kv; the state is every layer's keys, values
    and, where it is a tensor (the static layers), the length written so far."""
    def step(ids: torch.Tensor) -> torch.Tensor:
        return model(input_ids=ids, past_key_values=kv, use_cache=True).logits

    def state() -> dict[str, torch.Tensor]:
        out = {}
        for i, layer in enumerate(kv.layers):
            out[f"layers[{i}].keys"], out[f"layers[{i}].values"] = layer.keys, layer.values
            if isinstance(getattr(layer, "cumulative_length", None), torch.Tensor):
                out[f"layers[{i}].cumulative_length"] = layer.cumulative_length
        return out
    return Target(step, _token_inputs(device), state, name=name, device=device)


def _token_inputs(device: str):
    def make_inputs(k: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(100 + k)
        return torch.randint(0, VOCAB, (B, 1), generator=g).to(device)
    return make_inputs


def _llama(device: str, cache: str, **cfg) -> Target:
    from transformers import DynamicCache, LlamaForCausalLM, StaticCache
    torch.manual_seed(0)
    config = _llama_config(**cfg)
    model = LlamaForCausalLM(config).to(device).eval()
    kv = StaticCache(config=config, max_cache_len=48) if cache == "static" else DynamicCache(config=config)
    with torch.no_grad():                               # prefill outside the step: the step is one decode token
        model(torch.arange(4, device=device).repeat(B, 1), past_key_values=kv, use_cache=True)
    return _cached_decode(model, kv, device, f"hf llama ({cache} cache)")


def hf_llama_static(device: str = "cpu") -> Target:
    return _llama(device, "static")


def hf_llama_dynamic(device: str = "cpu") -> Target:
    return _llama(device, "dynamic")


def hf_llama_dynamic_rope(device: str = "cpu") -> Target:
    return _llama(device, "static", rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0})


def _scores(device: str):
    def make_inputs(k: int):
        g = torch.Generator().manual_seed(200 + k)
        return {"input_ids": torch.randint(0, VOCAB, (B, 6), generator=g).to(device),
                "scores": (torch.randn(B, VOCAB, generator=g) * 3).to(device)}
    return make_inputs


def hf_sampling(device: str = "cpu") -> Target:
    from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper
    procs = LogitsProcessorList([TemperatureLogitsWarper(0.7), TopKLogitsWarper(8), TopPLogitsWarper(0.9)])
    out = torch.zeros(B, 1, dtype=torch.long, device=device)

    def step(inp):
        scores = procs(inp["input_ids"], inp["scores"])
        out.copy_(torch.multinomial(F.softmax(scores, dim=-1), num_samples=1))
        return out
    return Target(step, _scores(device), lambda: {"out": out}, name="hf logits warpers + multinomial", device=device)


SUPPRESS = [3, 7, 11, 50]


def hf_suppress_tokens_once(device: str = "cpu") -> Target:
    from transformers import SuppressTokensLogitsProcessor
    proc = SuppressTokensLogitsProcessor(SUPPRESS, device=device)
    out = torch.zeros(B, dtype=torch.long, device=device)

    def step(inp):
        out.copy_(proc(inp["input_ids"], inp["scores"]).argmax(-1))
        return out
    return Target(step, _scores(device), lambda: {"out": out}, name="hf suppress-tokens (built once)", device=device)


def hf_suppress_tokens_per_step(device: str = "cpu") -> Target:
    from transformers import SuppressTokensLogitsProcessor
    out = torch.zeros(B, dtype=torch.long, device=device)

    def step(inp):
        proc = SuppressTokensLogitsProcessor(SUPPRESS)       # the processor's default device: "cpu"
        out.copy_(proc(inp["input_ids"], inp["scores"]).argmax(-1))
        return out
    return Target(step, _scores(device), lambda: {"out": out}, name="hf suppress-tokens (built per step)", device=device)


def hf_suppress_tokens_default_device(device: str = "cpu") -> Target:
    from transformers import SuppressTokensLogitsProcessor
    proc = SuppressTokensLogitsProcessor(SUPPRESS)           # built before the step, with its default device
    out = torch.zeros(B, dtype=torch.long, device=device)

    def step(inp):
        out.copy_(proc(inp["input_ids"], inp["scores"]).argmax(-1))
        return out
    return Target(step, _scores(device), lambda: {"out": out}, name="hf suppress-tokens (built once, default device)",
                  device=device)


def _mixtral(device: str, experts: str) -> Target:
    from transformers import MixtralConfig
    from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock
    torch.manual_seed(0)
    config = MixtralConfig(hidden_size=32, intermediate_size=48, num_local_experts=8, num_experts_per_tok=2,
                           num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2, vocab_size=VOCAB)
    config._experts_implementation = experts
    block = MixtralSparseMoeBlock(config).to(device).eval()
    for p in block.parameters():
        nn.init.normal_(p, std=0.2)
    out = torch.zeros(B, 1, 32, device=device)

    def make_inputs(k: int) -> torch.Tensor:
        return torch.randn(B, 1, 32, generator=torch.Generator().manual_seed(300 + k)).to(device)

    def step(x):
        y = block(x)
        out.copy_(y[0] if isinstance(y, tuple) else y)
        return out
    return Target(step, make_inputs, lambda: {"out": out}, name=f"hf mixtral moe block ({experts} experts)", device=device)


def hf_mixtral_moe_eager(device: str = "cpu") -> Target:
    return _mixtral(device, "eager")


def hf_mixtral_moe_batched(device: str = "cpu") -> Target:
    return _mixtral(device, "batched_mm")


def _deepseek_v3_moe(device: str, dtype: torch.dtype) -> Target:
    from transformers import DeepseekV3Config
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3MoE
    torch.manual_seed(0)
    config = DeepseekV3Config(hidden_size=32, moe_intermediate_size=16, n_routed_experts=16, num_experts_per_tok=4,
                              n_group=4, topk_group=2, n_shared_experts=1, num_hidden_layers=1, num_attention_heads=4,
                              num_key_value_heads=4, vocab_size=VOCAB)
    config._experts_implementation = "grouped_mm"
    block = DeepseekV3MoE(config)
    for p in block.parameters():
        nn.init.normal_(p, std=0.2)
    block.gate.e_score_correction_bias.normal_(std=0.1)     # the bias steers the choice, not the weights
    block = block.to(device=device, dtype=dtype).eval()
    out = torch.zeros(B, 1, 32, device=device, dtype=dtype)

    def make_inputs(k: int) -> torch.Tensor:
        return torch.randn(B, 1, 32, generator=torch.Generator().manual_seed(400 + k)).to(device=device, dtype=dtype)

    def step(x):
        out.copy_(block(x))
        return out
    return Target(step, make_inputs, lambda: {"out": out}, name=f"hf deepseek-v3 moe (group-limited router, grouped_mm "
                  f"experts, {str(dtype)[6:]})", device=device)


def hf_deepseek_v3_moe_grouped_fp32(device: str = "cpu") -> Target:
    return _deepseek_v3_moe(device, torch.float32)


def hf_deepseek_v3_moe_grouped_bf16(device: str = "cpu") -> Target:
    return _deepseek_v3_moe(device, torch.bfloat16)


def _mistral_swa(device: str, window: int, prefill: int) -> Target:
    from transformers import MistralConfig, MistralForCausalLM, StaticCache
    torch.manual_seed(0)
    config = MistralConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=64,
                           sliding_window=window, tie_word_embeddings=False)
    config._attn_implementation = "sdpa"
    model = MistralForCausalLM(config).to(device).eval()
    kv = StaticCache(config=config, max_cache_len=48)       # every layer a StaticSlidingWindowLayer
    with torch.no_grad():
        model(torch.arange(prefill, device=device).repeat(B, 1) % VOCAB, past_key_values=kv, use_cache=True)
    return _cached_decode(model, kv, device,
                          f"hf mistral static sliding-window cache (window {window}, prefill {prefill})")


def hf_mistral_swa_filling(device: str = "cpu") -> Target:
    return _mistral_swa(device, window=32, prefill=4)       # the window never fills during the run


def hf_mistral_swa_full(device: str = "cpu") -> Target:
    return _mistral_swa(device, window=8, prefill=12)       # the prefill already overflows the window


def hf_penalties_and_stopping(device: str = "cpu") -> Target:
    from transformers import (EosTokenCriteria, LogitsProcessorList, MaxLengthCriteria, MinPLogitsWarper,
                              NoRepeatNGramLogitsProcessor, RepetitionPenaltyLogitsProcessor, StoppingCriteriaList)
    procs = LogitsProcessorList([RepetitionPenaltyLogitsProcessor(1.3), NoRepeatNGramLogitsProcessor(2),
                                 MinPLogitsWarper(0.1)])
    crit = StoppingCriteriaList([MaxLengthCriteria(max_length=64), EosTokenCriteria(eos_token_id=[0, 5, 9])])
    tok = torch.zeros(B, 1, dtype=torch.long, device=device)
    unfinished = torch.ones(B, 1, dtype=torch.long, device=device)

    def make_inputs(k: int):
        inp = _scores(device)(k)
        inp["input_ids"][:, 3:5] = inp["input_ids"][:, 0:2]     # repeats, so the n-gram ban and the penalty bite
        return inp

    def step(inp):         # generate()'s per-token tail: process, pick, stop check (without its host-side any())
        tok.copy_(procs(inp["input_ids"], inp["scores"]).argmax(-1, keepdim=True))
        unfinished.mul_(~crit(torch.cat([inp["input_ids"], tok], dim=-1), inp["scores"])[:, None])
        return tok
    return Target(step, make_inputs, lambda: {"tok": tok, "unfinished": unfinished},
                  name="hf repetition penalty + no-repeat-ngram + min-p, then max-length + eos stopping", device=device)


def hf_encoder_no_repeat_ngram(device: str = "cpu") -> Target:
    from transformers.generation.logits_process import EncoderNoRepeatNGramLogitsProcessor
    enc = torch.randint(0, VOCAB, (B, 8), generator=torch.Generator().manual_seed(5)).to(device)
    proc = EncoderNoRepeatNGramLogitsProcessor(2, enc)
    out = torch.zeros(B, dtype=torch.long, device=device)

    def make_inputs(k: int):
        inp = _scores(device)(k)
        inp["input_ids"][:, -1] = enc[:, k % 7]           # the last token starts an encoder bigram: a ban applies
        return inp

    def step(inp):
        out.copy_(proc(inp["input_ids"], inp["scores"]).argmax(-1))
        return out
    return Target(step, make_inputs, lambda: {"out": out}, name="hf encoder no-repeat-ngram", device=device)


# ---------------------------------------------------------------- a gpt-fast-style decoder (written here)

@dataclass
class Args:
    dim: int = 32
    n_layer: int = 2
    n_head: int = 4
    vocab: int = VOCAB
    max_seq: int = 32
    rope_base: float = 10000.0


class KVCache(nn.Module):
    def __init__(self, b: int, h: int, s: int, d: int):
        super().__init__()
        self.register_buffer("k", torch.zeros(b, h, s, d))
        self.register_buffer("v", torch.zeros(b, h, s, d))

    def update(self, pos: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
        self.k.index_copy_(2, pos, k)          # [b, h, s, d] at device positions
        self.v.index_copy_(2, pos, v)
        return self.k, self.v


class Attention(nn.Module):
    def __init__(self, a: Args):
        super().__init__()
        self.h, self.hd = a.n_head, a.dim // a.n_head
        self.wqkv = nn.Linear(a.dim, 3 * a.dim, bias=False)
        self.wo = nn.Linear(a.dim, a.dim, bias=False)
        self.cache: KVCache | None = None

    def forward(self, x, freqs, mask, pos):
        b, s, _ = x.shape
        q, k, v = self.wqkv(x).split(self.h * self.hd, dim=-1)
        q, k, v = (t.view(b, s, self.h, self.hd) for t in (q, k, v))
        q, k = rope(q, freqs), rope(k, freqs)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))                     # [b, h, s, hd]
        k, v = self.cache.update(pos, k, v)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.wo(y.transpose(1, 2).reshape(b, s, -1))


def rope(x, freqs):
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))      # [b, s, h, hd/2]
    return torch.view_as_real(xc * freqs[None, :, None]).flatten(3).type_as(x)


class Block(nn.Module):
    def __init__(self, a: Args):
        super().__init__()
        self.attn, self.n1, self.n2 = Attention(a), nn.RMSNorm(a.dim), nn.RMSNorm(a.dim)
        self.w1, self.w2 = nn.Linear(a.dim, 2 * a.dim, bias=False), nn.Linear(2 * a.dim, a.dim, bias=False)

    def forward(self, x, freqs, mask, pos):
        x = x + self.attn(self.n1(x), freqs, mask, pos)
        return x + self.w2(F.silu(self.w1(self.n2(x))))


class GPT(nn.Module):
    def __init__(self, a: Args, batch: int):
        super().__init__()
        self.args = a
        self.emb, self.out = nn.Embedding(a.vocab, a.dim), nn.Linear(a.dim, a.vocab, bias=False)
        self.layers = nn.ModuleList(Block(a) for _ in range(a.n_layer))
        self.norm = nn.RMSNorm(a.dim)
        for layer in self.layers:
            layer.attn.cache = KVCache(batch, a.n_head, a.max_seq, a.dim // a.n_head)
        hd = a.dim // a.n_head
        inv = 1.0 / a.rope_base ** (torch.arange(0, hd, 2).float() / hd)
        self.register_buffer("freqs", torch.polar(torch.ones(a.max_seq, hd // 2), torch.outer(torch.arange(a.max_seq).float(), inv)))
        self.register_buffer("causal", torch.tril(torch.ones(a.max_seq, a.max_seq, dtype=torch.bool)))

    def forward(self, idx, pos, mask=None):                                   # idx [b, s], pos [s] on the device
        x = self.emb(idx)
        freqs, mask = self.freqs[pos], (self.causal[None, None, pos] if mask is None else mask)
        for layer in self.layers:
            x = layer(x, freqs, mask, pos)
        return self.out(self.norm(x))


def sample(logits, temperature: float = 0.8, top_k: int = 8):
    logits = logits / max(temperature, 1e-5)
    pivot = torch.topk(logits, top_k)[0][..., -1, None]
    logits = torch.where(logits < pivot, -float("inf"), logits)
    probs = F.softmax(logits, dim=-1)
    q = torch.empty_like(probs).exponential_(1)                              # multinomial without a sync
    return torch.argmax(probs / q, dim=-1, keepdim=True)


# The device as scripts spell it: "cpu" on a machine without a GPU, so a CPU run must not read it as the host.
DEV = "cuda" if torch.cuda.is_available() else "cpu"


def _gptfast(device: str, sampling: bool, host_pos: bool = False, dev_mask: bool = False) -> Target:
    torch.manual_seed(0)
    model = GPT(Args(), B).to(device).eval()
    pos = torch.tensor([4], device=device)                                    # state: the next position, on device
    tok = torch.zeros(B, 1, dtype=torch.long, device=device)
    host = {"pos": 4}
    with torch.no_grad():
        model(torch.arange(4, device=device).repeat(B, 1), torch.arange(4, device=device))

    def step(x: torch.Tensor) -> torch.Tensor:
        p = pos
        if host_pos:
            p.fill_(host["pos"])                                              # a host int, baked by capture
            host["pos"] += 1
        mask = (torch.arange(model.args.max_seq, device=DEV) <= p)[None, None, None] if dev_mask else None
        logits = model(x, p, mask)[:, -1]
        tok.copy_(sample(logits) if sampling else logits.argmax(-1, keepdim=True))
        if not host_pos:
            pos.add_(1)
        return tok

    def state():
        caches = {f"layers[{i}].k": m.attn.cache.k for i, m in enumerate(model.layers)}
        caches.update({f"layers[{i}].v": m.attn.cache.v for i, m in enumerate(model.layers)})
        return {**caches, "pos": pos, "tok": tok}
    name = "gpt-fast decode" + (" (sampling)" if sampling else " (greedy)") + (" host position" if host_pos else "")
    return Target(step, _token_inputs(device), state, name=name, device=device)


def gptfast_greedy(device: str = "cpu") -> Target:
    return _gptfast(device, sampling=False)


def gptfast_sampling(device: str = "cpu") -> Target:
    return _gptfast(device, sampling=True)


def gptfast_host_pos(device: str = "cpu") -> Target:
    return _gptfast(device, sampling=False, host_pos=True)


def gptfast_dev_variable(device: str = "cpu") -> Target:
    return _gptfast(DEV, sampling=False, dev_mask=True)




# ---------------------------------------------------------------- a Mamba-style decoder with a functional cache (written here)

class MambaLayer(nn.Module):
    """One Mamba-1 block in its one-token recurrent form, as the reference `causal_conv1d_update` and
    `selective_state_update` compute it (mamba_ssm/ops/triton/selective_state_update.py `selective_state_update_ref`),
    but written functionally: each step returns new conv and SSM states instead of writing the old ones in place."""

    def __init__(self, dim: int = 16, d_state: int = 4, d_conv: int = 4):
        super().__init__()
        self.inner, self.d_state = 2 * dim, d_state
        self.in_proj = nn.Linear(dim, 2 * self.inner, bias=False)
        self.conv_w = nn.Parameter(torch.randn(self.inner, d_conv) * 0.3)
        self.x_proj = nn.Linear(self.inner, 1 + 2 * d_state, bias=False)
        self.dt_proj = nn.Linear(1, self.inner)
        self.A_log = nn.Parameter(torch.log(torch.arange(1, d_state + 1).float()).repeat(self.inner, 1))
        self.D = nn.Parameter(torch.ones(self.inner))
        self.out_proj = nn.Linear(self.inner, dim, bias=False)

    def forward(self, x, conv_state, ssm_state):                              # x [b, dim]
        xz = self.in_proj(x)
        x, z = xz.chunk(2, dim=-1)
        conv_state = torch.cat([conv_state[:, :, 1:], x[:, :, None]], dim=-1)   # a new tensor every step
        x = F.silu((conv_state * self.conv_w).sum(-1))
        dt, Bm, Cm = self.x_proj(x).split([1, self.d_state, self.d_state], dim=-1)
        dt = F.softplus(self.dt_proj(dt))
        dA = torch.exp(dt[..., None] * -torch.exp(self.A_log))
        ssm_state = ssm_state * dA + (dt[..., None] * Bm[:, None, :]) * x[..., None]
        y = (ssm_state @ Cm[..., None]).squeeze(-1) + self.D * x
        return self.out_proj(y * F.silu(z)), conv_state, ssm_state


def mamba_functional_cache(device: str = "cpu") -> Target:
    torch.manual_seed(0)
    dim, layers = 16, 2
    emb, head = nn.Embedding(VOCAB, dim).to(device), nn.Linear(dim, VOCAB, bias=False).to(device)
    blocks = nn.ModuleList(MambaLayer(dim) for _ in range(layers)).to(device).eval()
    cache = {f"conv[{i}]": torch.zeros(B, 2 * dim, 4, device=device) for i in range(layers)}
    cache.update({f"ssm[{i}]": torch.zeros(B, 2 * dim, 4, device=device) for i in range(layers)})
    tok = torch.zeros(B, 1, dtype=torch.long, device=device)

    def step(ids: torch.Tensor) -> torch.Tensor:
        h = emb(ids[:, 0])
        for i, blk in enumerate(blocks):
            y, cache[f"conv[{i}]"], cache[f"ssm[{i}]"] = blk(h, cache[f"conv[{i}]"], cache[f"ssm[{i}]"])
            h = h + y
        tok.copy_(head(h).argmax(-1, keepdim=True))
        return tok
    return Target(step, _token_inputs(device), lambda: {**cache, "tok": tok}, name="mamba-style decode (functional cache)",
                  device=device)


def hf_speculative_sampling(device: str = "cpu") -> Target:
    from transformers.generation.utils import _speculative_sampling
    gamma = 4
    out = torch.zeros(1, gamma + 1, dtype=torch.long, device=device)
    n = torch.zeros((), dtype=torch.long, device=device)

    def make_inputs(k: int):
        g = torch.Generator().manual_seed(500 + k)
        return {"ids": torch.randint(0, VOCAB, (1, 6 + gamma), generator=g).to(device),
                "q": torch.randn(1, gamma, VOCAB, generator=g).to(device),
                "p": torch.randn(1, gamma + 1, VOCAB, generator=g).to(device)}

    def step(inp):
        tokens, n_matches = _speculative_sampling(inp["ids"], inp["q"], gamma, inp["p"], False)
        out.zero_()
        out[:, : tokens.shape[1]] = tokens
        n.copy_(n_matches)
        return out
    return Target(step, make_inputs, lambda: {"out": out, "n": n}, name="hf speculative sampling", device=device)


FACTORIES = {name: globals()[name] for name in EXPECTED}
