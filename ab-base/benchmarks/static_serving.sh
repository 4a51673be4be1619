#!/usr/bin/env bash
# The static layer on real serving code it was not written against, scanned from the entry points its engine
# captures:
#   vllm        vLLM's v1 GPU worker (`vllm/v1`, the llama model, `model_executor/layers`), from its two
#               execute_model entry points (the whole step, host preparation included)
#   flashinfer  flashinfer's whole package, from the `run` of the decode/prefill/MLA wrappers (after `plan`,
#               outside capture, as flashinfer documents) and the sampling, norm, RoPE and activation functions
#   sglang      sglang 0.5.23's decode CUDA graph: what DecodeCudaGraphRunner.capture_one_shape's run_once
#               (model_executor/runner/decode_cuda_graph_runner.py:1402) runs under capture, i.e. the model's forward
#               in decode mode (LlamaForCausalLM, DeepseekV2ForCausalLM: their layers, the MoE, the logits processor)
#               and the attention backend's forward_decode (flashinfer, triton), which RadixAttention reaches through
#               get_attn_backend() (radix_attention.py:183, a context lookup the scan cannot follow, hence its own
#               entry point). Left out: init_forward_metadata_out_graph (the host-side prep before capture and
#               before each replay, base_attn_backend.py:117-137) and init_forward_metadata_in_graph, which is
#               captured but is the base class's no-op for both backends (neither overrides it)
#
#   bash benchmarks/static_serving.sh PACKAGE [REV]    this checkout's graphcheck, and (with REV) the one at git
#                                                     revision REV
#
# Downloads the pinned wheel once (no dependencies, nothing installed: the static scan only parses it) into
# $GRAPHCHECK_CACHE_DIR (default ~/.cache/graphcheck-corpus). Prints, per graphcheck, the functions in scope, the
# unresolved calls and every finding; benchmarks/results/ holds the committed runs. (Named static_vllm.sh before
# flashinfer joined; the runs of 2026-12-04 and 2026-12-05 07:55 used it with vllm implied.)
set -euo pipefail
PKG=${1:-}
case $PKG in
  vllm) VERSION=${VLLM_VERSION:-0.34.0}; WHEEL=vllm
    PATHS="vllm/v1 vllm/model_executor/models/llama.py vllm/model_executor/layers"
    ENTRIES="vllm.v1.worker.gpu_worker:Worker.execute_model vllm.v1.worker.gpu.model_runner:GPUModelRunner.execute_model" ;;
  flashinfer) VERSION=${FLASHINFER_VERSION:-0.7.4}; WHEEL=flashinfer_python
    PATHS="flashinfer"
    ENTRIES="flashinfer.decode:BatchDecodeWithPagedKVCacheWrapper.run
             flashinfer.decode:CUDAGraphBatchDecodeWithPagedKVCacheWrapper.run
             flashinfer.mla._batch_mla._wrapper:BatchMLAPagedAttentionWrapper.run
             flashinfer.prefill:BatchPrefillWithPagedKVCacheWrapper.run
             flashinfer.prefill:BatchPrefillWithRaggedKVCacheWrapper.run
             flashinfer.sampling:top_k_top_p_sampling_from_probs flashinfer.sampling:top_p_sampling_from_probs
             flashinfer.sampling:min_p_sampling_from_probs flashinfer.sampling:sampling_from_logits
             flashinfer.norm:rmsnorm flashinfer.norm:fused_add_rmsnorm
             flashinfer.rope:apply_rope_with_cos_sin_cache_inplace flashinfer.rope:apply_rope_pos_ids_inplace
             flashinfer.activation:silu_and_mul flashinfer.activation:gelu_and_mul" ;;
  sglang) VERSION=${SGLANG_VERSION:-0.5.23}; WHEEL=sglang
    PATHS="sglang/srt/models/llama.py sglang/srt/models/deepseek_v2.py sglang/srt/layers
           sglang/srt/model_executor/forward_batch_info.py"
    ENTRIES="sglang.srt.models.llama:LlamaForCausalLM.forward
             sglang.srt.models.deepseek_v2:DeepseekV2ForCausalLM.forward
             sglang.srt.layers.attention.flashinfer_backend:FlashInferAttnBackend.forward_decode
             sglang.srt.layers.attention.triton_backend:TritonAttnBackend.forward_decode" ;;
  *) echo "static_serving.sh: expected a package, vllm, flashinfer or sglang, found '${PKG}'" >&2; exit 2 ;;
esac
shift
CACHE=${GRAPHCHECK_CACHE_DIR:-$HOME/.cache/graphcheck-corpus}
SRC=$CACHE/$PKG-$VERSION
if [ ! -d "$SRC/$PKG" ]; then
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  python -m pip download -q --no-deps --only-binary=:all: "$WHEEL==$VERSION" -d "$tmp"
  python - "$tmp" "$SRC" "$WHEEL" <<'PY'
import glob, os, sys, zipfile
tmp, dest, wheel = sys.argv[1:]
part = dest + ".part"
with zipfile.ZipFile(glob.glob(os.path.join(tmp, f"{wheel}-*.whl"))[0]) as z:
    z.extractall(part, [n for n in z.namelist() if n.endswith(".py")])
os.replace(part, dest)
PY
fi
ROOT=$(cd "$(dirname "$0")/.." && pwd)
args=()
for e in $ENTRIES; do args+=(--entry-point "$e"); done
scan() {   # PYTHONPATH selects which graphcheck runs
  # shellcheck disable=SC2086  # PATHS is a list of paths
  (cd "$SRC" && PYTHONPATH=$1 python -m graphcheck scan $PATHS --no-cache --jobs "${JOBS:-2}" --show-scope \
     --output-format concise "${args[@]}" 2>&1 || true)
}
echo "### graphcheck at $(git -C "$ROOT" rev-parse --short HEAD)$(git -C "$ROOT" diff --quiet || echo '+changes'), $PKG $VERSION, $(date -u +%FT%H:%MZ)"
scan "$ROOT"
if [ $# -ge 1 ]; then
  old=$(mktemp -d); git -C "$ROOT" archive "$1" graphcheck | tar -x -C "$old"
  echo; echo "### graphcheck at $(git -C "$ROOT" rev-parse --short "$1"), $PKG $VERSION"
  scan "$old"; rm -rf "$old"
fi
