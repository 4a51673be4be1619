"""Hand-triaged expectations for the third-party corpus (fetch.py), one entry per package, each scanned from its
natural entry points with the declarations a user of that code would write (`[tool.graphcheck]` host-resident).

- HF transformers 4.46.3: two model files (Llama, Mixtral) and the sampling logits processors of generation.
- sglang 0.5.23: the model runner's per-step `ModelRunner.forward`, the `Sampler`, the llama and qwen2 model files
  and the logits processor they reach (the rest of sglang is outside the scanned files: calls into it are not
  followed).
- flashinfer 0.7.4: the public sampling functions and the paged decode wrapper's `run` (what flashinfer documents
  as running under capture after `plan()`), with the utils module they call; the JIT kernel modules are outside.

Every line graphcheck reports there, and every hazard a reader finds in the reached code, is listed with a
verdict. TRUE: a real host sync / capture hazard on that line (found or not: recall counts them all). FALSE:
reported by this or an earlier version of the scan, or a look-alike a reader checked, but not a hazard (must stay
unreported).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from fetch import PACKAGES, corpus_dir


@dataclass
class Corpus:
    package: str
    entry_points: list[str]
    true: dict
    false: dict
    host_resident: list[str] = field(default_factory=list)   # with the reason from the source, per entry
    why_declared: str = ""

    @property
    def files(self) -> list[str]:
        return [f for f in PACKAGES[self.package][3] if not f.endswith("__init__.py")]

    @property
    def version(self) -> str:
        return PACKAGES[self.package][1]

    def root(self):
        return corpus_dir(self.package)


HF_ENTRY_POINTS = [
    "transformers.models.llama.modeling_llama:LlamaForCausalLM.forward",
    "transformers.models.mixtral.modeling_mixtral:MixtralForCausalLM.forward",
    "transformers.generation.logits_process:TopKLogitsWarper.__call__",
    "transformers.generation.logits_process:TopPLogitsWarper.__call__",
    "transformers.generation.logits_process:MinPLogitsWarper.__call__",
    "transformers.generation.logits_process:TemperatureLogitsWarper.__call__",
    "transformers.generation.logits_process:RepetitionPenaltyLogitsProcessor.__call__",
    "transformers.generation.logits_process:NoRepeatNGramLogitsProcessor.__call__",
]

L, M, P = "transformers/models/llama/modeling_llama.py", "transformers/models/mixtral/modeling_mixtral.py", \
    "transformers/generation/logits_process.py"
# (rule, file, line): why it is a real hazard in the captured step
HF_TRUE = {
    ("GC102", P, 875): "NoRepeatNGram: prev_input_ids[idx].tolist() copies each hypothesis to the host",
    ("GC102", P, 903): "NoRepeatNGram: .tolist() of the last n-gram per hypothesis",
    ("GC404", P, 976): "banned token ids, a Python list, index-written: the index list is copied host-to-device",
    ("GC201", L, 135): "dynamic RoPE: `if seq_len > max_seq_len_cached` reads torch.max(position_ids) back",
    ("GC406", L, 139): "dynamic RoPE re-registers inv_freq inside the step: replay keeps the captured buffer",
    ("GC406", L, 140): "max_seq_len_cached rebound to a device tensor inside the step",
    ("GC203", L, 142): "`seq_len < ... and ...` on a device tensor",
    ("GC406", L, 143): "inv_freq re-registered on reset",
    ("GC203", L, 992): "`0.0 in attention_mask` is Tensor.__contains__: a readback (flash-attention path)",
    ("GC406", M, 200): "rotary cos cache re-registered when the sequence grows (reached from forward)",
    ("GC406", M, 201): "rotary sin cache re-registered when the sequence grows",
    ("GC101", M, 428): "flash attention: position_ids[:, -1].max().item() sizes the rotary cache",
    ("GC302", M, 663): "MoE: one-argument torch.where(expert_mask[e]) per expert (data-dependent shape)",
    ("GC203", M, 1058): "`0.0 in attention_mask` (flash-attention path)",
}
# Lines an earlier version of the scan reported that are not hazards (must stay unreported): (rule, file, line): why
HF_FALSE = {
    ("GC701", L, 256): "sum() over a Python list of per-shard tensors adds on the device (pretraining_tp path)",
    ("GC201", L, 480): "torch.is_autocast_enabled() is a host bool",
    ("GC106", L, 489): "the f-string formats a dtype from torch.get_autocast_gpu_dtype()",
    ("GC201", M, 449): "torch.is_autocast_enabled() is a host bool",
    ("GC106", M, 458): "the f-string formats a dtype",
}

S, LP, MR = "sglang/srt/layers/sampler.py", "sglang/srt/layers/logits_processor.py", \
    "sglang/srt/model_executor/model_runner.py"
SGL_ENTRY_POINTS = [
    "sglang.srt.model_executor.model_runner:ModelRunner.forward",
    "sglang.srt.layers.sampler:Sampler.forward",
    "sglang.srt.models.llama:LlamaForCausalLM.forward",
    "sglang.srt.models.qwen2:Qwen2ForCausalLM.forward",
]
SGL_TRUE = {
    ("GC601", LP, 984): "torch.cuda.synchronize() before the LM head when SGLANG_TRACE_LOGITS_E2E_SYNC is set "
                        "(a debug trace, but a full device sync on that path every step)",
    ("GC601", LP, 1005): "the same trace's synchronize() after the LM head",
    ("GC403", LP, 1423): "multi-item scoring: torch.cat of the per-request delimiter indices (CPU tensors, says "
                         "the docstring) copied .to(device, non_blocking=True) from pageable memory: not async",
    ("GC403", LP, 1517): "compute_logprobs_at_positions mirrors it: torch.cat(token_indices_to_pool pieces) "
                         "non_blocking from pageable host memory",
    ("GC606", MR, 2314): "elastic EP: dist.barrier on the WORLD group inside forward's maybe_join_ep_ranks path",
    ("GC401", MR, 2487): "active_ranks (a device tensor; elastic_ep.py keeps active_ranks_cpu beside it)"
                         ".new_tensor(int(...)): a host int copied to the device on every forward while joining",
    ("GC101", MR, 2489): "timeout.item() after the all_reduce reads the device flag back",
    ("GC601", MR, 2564): "current_platform.synchronize() before admitting the joining ranks",
}
SGL_FALSE = {
    ("GC305", S, 823): "probs_sort[mask] = 0.0: a boolean-mask write of a CPU scalar is ATen's masked_fill_ fast "
                       "path (canDispatchToMaskedFill), no nonzero() and no sync",
    ("GC305", S, 827): "the same for the top-p mask",
    ("GC305", S, 835): "the same for the min-p mask",
    ("GC104", LP, 1085): "bool(self.final_logit_softcapping): a float from the model config",
    ("GC702", LP, 801): "`for j, hidden in enumerate(aux_hidden_states)`: a Python list of tensors",
}

FS, FD = "flashinfer/sampling.py", "flashinfer/decode.py"
FI_ENTRY_POINTS = [f"flashinfer.sampling:{f}" for f in (
    "softmax", "sampling_from_logits", "sampling_from_probs", "top_p_sampling_from_probs", "top_k_sampling_from_probs",
    "min_p_sampling_from_probs", "top_k_top_p_sampling_from_logits", "top_k_top_p_sampling_from_probs",
    "top_p_renorm_probs", "top_k_renorm_probs", "top_k_mask_logits", "chain_speculative_sampling")] + [
    # what flashinfer documents as running inside a captured graph after plan(); the CUDA-graph wrapper inherits run
    "flashinfer.decode:BatchDecodeWithPagedKVCacheWrapper.run",
    "flashinfer.decode:CUDAGraphBatchDecodeWithPagedKVCacheWrapper.run",
]
FI_TRUE = {
    ("GC503", FS, 58): "get_seed_and_offset (every sampling op without an explicit seed) reads the CUDA generator's "
                       "state on the host: a captured graph replays the seed and offset of capture",
    ("GC503", FS, 62): "and writes the advanced state back with set_state, on the host",
    ("GC604", FS, 1115): "check_nan=True: torch.any(torch.isnan(logits)) tested by `if` reads the flag back",
    ("GC604", FS, 1220): "the same guard in sampling_from_probs",
    ("GC604", FS, 1350): "the same guard in top_p_sampling_from_probs",
    ("GC604", FS, 1481): "the same guard in top_k_sampling_from_probs",
    ("GC604", FS, 1608): "the same guard in min_p_sampling_from_probs",
    ("GC604", FS, 1904): "the same guard in top_k_top_p_sampling_from_logits (joint order)",
    ("GC604", FS, 2086): "the same guard in top_k_top_p_sampling_from_probs",
    ("GC406", FD, 3566): "XQA MTP decode: the causal mask is rebuilt and rebound in run() when the batch or q_len "
                         "changes: a graph captured before keeps the old tensor",
}
# look-alikes in the reached code, read by hand: each stays unreported
FI_FALSE = {
    ("GC402", FD, 3479): "cuTile path: _kv_lens_device is made on self.device in plan(): .to(q.device) copies nothing",
    ("GC402", FD, 3480): "the block table is built on self.device in plan() too",
    ("GC104", FD, 3532): "float(v_scale): v_scale is documented Optional[float], a host scalar",
    ("GC104", FS, 878): "float(temperature): the tensor case returned above, this is a Python Real",
    ("GC101", FS, 59): "map(int, state.view(torch.int64)): the generator state get_state() returns is a CPU tensor",
}

CORPORA = [
    Corpus("transformers", HF_ENTRY_POINTS, HF_TRUE, HF_FALSE),
    Corpus("sglang", SGL_ENTRY_POINTS, SGL_TRUE, SGL_FALSE,
           host_resident=["multi_item_delimiter_indices", "token_indices_to_pool"],
           why_declared="LogitsProcessor's multi-item scoring documents both lists as CPU tensors "
                        "(`Pre-computed delimiter positions per request (CPU tensors)`); nothing in the code says so"),
    Corpus("flashinfer", FI_ENTRY_POINTS, FI_TRUE, FI_FALSE),
]
