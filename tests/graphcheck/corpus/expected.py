"""Hand-triaged expectations for the third-party corpus (fetch.py): HF transformers 4.46.3, from the natural
entry points of two model files (Llama, Mixtral) and the sampling logits processors of generation.

Every line graphcheck reports there, and every hazard a reader finds in the reached code, is listed with a
verdict. TRUE: a real host sync / capture hazard on that line. FALSE: reported but not a hazard (a false
positive the scan must not produce). MISSED: a real hazard the scan is expected to find.
"""
from __future__ import annotations

from fetch import corpus_dir

FILES = ["transformers/generation/logits_process.py", "transformers/models/llama/modeling_llama.py",
         "transformers/models/mixtral/modeling_mixtral.py"]
ENTRY_POINTS = [
    "transformers.models.llama.modeling_llama:LlamaForCausalLM.forward",
    "transformers.models.mixtral.modeling_mixtral:MixtralForCausalLM.forward",
    "transformers.generation.logits_process:TopKLogitsWarper.__call__",
    "transformers.generation.logits_process:TopPLogitsWarper.__call__",
    "transformers.generation.logits_process:MinPLogitsWarper.__call__",
    "transformers.generation.logits_process:TemperatureLogitsWarper.__call__",
    "transformers.generation.logits_process:RepetitionPenaltyLogitsProcessor.__call__",
    "transformers.generation.logits_process:NoRepeatNGramLogitsProcessor.__call__",
]


def ROOT():
    return corpus_dir()

L, M, P = "transformers/models/llama/modeling_llama.py", "transformers/models/mixtral/modeling_mixtral.py", \
    "transformers/generation/logits_process.py"
# (rule, file, line): why it is a real hazard in the captured step
TRUE = {
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
FALSE = {
    ("GC701", L, 256): "sum() over a Python list of per-shard tensors adds on the device (pretraining_tp path)",
    ("GC201", L, 480): "torch.is_autocast_enabled() is a host bool",
    ("GC106", L, 489): "the f-string formats a dtype from torch.get_autocast_gpu_dtype()",
    ("GC201", M, 449): "torch.is_autocast_enabled() is a host bool",
    ("GC106", M, 458): "the f-string formats a dtype",
}
