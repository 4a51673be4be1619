#!/usr/bin/env bash
# Every GPU check and measurement of the project, as stages of one script (each stage fits one 10-minute device
# call; name several to run them in order in one call):
#
#   bash benchmarks/h200.sh check      build the CUDA extension; side by side: the kernel tests, every other cuda test
#                                      (graph-safe decode, runtime layers), `graphcheck capture` of the graph-safe
#                                      target and benchmarks/official_numerics.py (issue 36: graph-safe vs reference
#                                      bit for bit on this GPU) (correctness only: nothing is timed while they share it);
#                                      then the Flash-dimension tests alone (CHECK_FLASH=0: not; CHECK_K: the kernel
#                                      tests' -k, e.g. "attention")
#   bash benchmarks/h200.sh flash      the Flash-dimension CUDA tests alone (what `check` runs last unless CHECK_FLASH=0:
#                                      the graph-safe decode's replay at Flash's layer dimensions, its kernels against
#                                      the references), building the extension first
#   bash benchmarks/h200.sh tests      pytest on TESTS_ARGS (e.g. "tests/kernels -k 'f32 or bf16'", quotes as in a shell),
#                                      building the extension first (TESTS_NUMERICS=1: official_numerics.py
#                                      --steps 320 beside them, as `check` runs it; NUMERICS_ARGS: its further
#                                      options, e.g. "--knob dsv4_model.attention.NORM_FP8=True" to gate a candidate)
#   bash benchmarks/h200.sh memcheck   the kernel parity tests under compute-sanitizer memcheck, in MEMCHECK_SHARDS (4)
#                                      processes side by side (MEMCHECK_K: the tests' -k, default "parity and not flash")
#   bash benchmarks/h200.sh targets    `graphcheck capture` of every kernel target
#   bash benchmarks/h200.sh kernels    benchmarks/kernels.py, alone on the GPU (KERNELS_ARGS, e.g. "--only gemv,fp8")
#   bash benchmarks/h200.sh decode     benchmarks/decode.py: eager, graph replay, reduce-overhead, HBM floor, both
#                                      configs at B=1 and 8 (DECODE_ARGS, default "--compile-rows tiny:1,tiny:8,flash:1")
#   bash benchmarks/h200.sh profile    the Flash decode step's kernel profile (decode.py --profile, no compile)
#   bash benchmarks/h200.sh floor      issue 37: benchmarks/decode.py --depths 2,8 at B=1, 8, 32 (per layer, graph nodes,
#                                      kernels, the stored-bytes floor, the 43-layer projection), layers 1 (HCA) and 2
#                                      (CSA) profiled kernel by kernel at B=1 and 8, the bf16 head kernel's tests and
#                                      its A/B against the fp32 rows kernel (benchmarks/kernels.py --only bf16)
#                                      (FLOOR_ARGS: more decode.py options, e.g. "--experts 64")
#   bash benchmarks/h200.sh fuse       issue 37's fused small-chain ops (benchmarks/fuse_ab.py): their GPU parity tests and
#                                      `graphcheck capture` of their targets (side by side, while the extension builds),
#                                      then alone on the GPU: fused vs the launches they replaced (parity on poisoned
#                                      outputs, A/B at B=1,8,32), then decode.py --depths 2,8 --batches 1,8 --experts 64
#                                      with the fused ops on and off (FUSE_ONLY: some of tests,ab,depth; default all;
#                                      FUSE_UNFUSED: the slots the "off" run replaces, e.g. attend_ring; default all)
#   bash benchmarks/h200.sh drift      benchmarks/kernel_drift.py: where kernels and references part over steps
#                                      (DRIFT_ARGS, e.g. "--no-sim")
#   bash benchmarks/h200.sh speculative  issue 41's batched verify: side by side, benchmarks/row_invariance.py (which
#                                      product's rows differ between the plain step's n rows and the verify's n*(k+1),
#                                      tiny and Flash layers, B = 1, 2, 4, 8), both verifies' CUDA tests (capture,
#                                      300-step replay, greedy == plain greedy, forced drafts all accepted) and
#                                      `graphcheck capture` of both targets (correctness only: nothing timed)
#   bash benchmarks/h200.sh spec-bench benchmarks/decode.py --speculative 2, both verifies against their plain steps,
#                                      alone on the GPU (SPEC_ARGS, default "--configs tiny,flash --batches 1,8 --steps 20")
#   bash benchmarks/h200.sh thirdparty the third-party verdict table on CUDA
#   bash benchmarks/h200.sh ncu        Nsight Compute on the one-token FP4 GEMVs (benchmarks/ncu_gemv.py): issue- or
#                                      memory-bound
#   bash benchmarks/h200.sh ab         benchmarks/kernel_ab.py: the tree's FP4 decode kernels against each variant
#                                      waiting in benchmarks/ab/*.patch (AB_ARGS, e.g. "--only gemv1 my.patch")
#   bash benchmarks/h200.sh cutedsl    CuTeDSL (staged first: ../shared/device/stage-cutedsl.sh, into /root/site): the
#                                      CuTeDSL tests beside a memcheck of their parity tests, then benchmarks/cutedsl.py's
#                                      clamp-order mutant and planted hazards
#   bash benchmarks/h200.sh cutedsl-bench  benchmarks/cutedsl.py's capture of the CuTeDSL targets over 300 replays and
#                                      the A/B against the current kernels at B=1,8,32 (builds the CUDA C++ path first)
#   bash benchmarks/h200.sh bf16       issue 37's bf16-weight GEMV shape: benchmarks/bf16_sweep.py --f32 (the joined
#                                      compressor products and the router at B=1 and 8, the fp32 mix's clusters), then
#                                      decode.py --depths 2,8 --batches 1,8 with the default shape and with the sweep's
#                                      best (--bf16-shape), one after the other (BF16_ARGS: decode.py's options;
#                                      BF16_DEPTH=0: the sweep only)
#   bash benchmarks/h200.sh experts    issue 37's routed-experts schedule (EXPERTS_PAIRS_FIRST: the pairs as the grid's
#                                      fastest index, so pairs that share an expert read it together): the experts'
#                                      CUDA tests (both schedules bit for bit, parity), then decode.py --depths 2,8 with
#                                      it on and off, one after the other on the idle GPU, and with the attention's one
#                                      launch (EXPERTS_ARGS: decode.py's options, default "--configs flash --depths
#                                      2,8 --batches 1,8 --steps 20 --experts 64"; EXPERTS_TESTS=0 skips the tests;
#                                      EXPERTS_SPECS: the runs, "name|knobs" separated by ";")
#   bash benchmarks/h200.sh candidates issue 37's launch-shape choices: their GPU tests (the attention's two launches'
#                                      ring bit for bit their list and near the one launch, the decode pair over
#                                      joined projections), then decode.py --depths 2,8 at B=1: the defaults (two
#                                      launches since runs 77-80), the attention's one launch, the projections apart
#                                      (CANDIDATE_ARGS: its options, e.g. --batches 8 in
#                                      a second call; CANDIDATE_TESTS=0 skips the tests)
#   bash benchmarks/h200.sh overlap    issue 37's side streams (decode.OVERLAP: the compressors' products and folds beside
#                                      q and kv's chain, the shared expert beside the routed experts; QUERY_ON_SIDE: the
#                                      indexer's query beside q's heads): their CUDA tests
#                                      (300 replayed steps equal the one-stream step's, the tiny replay, the capture),
#                                      then decode.py --depths 2,8 with the side streams (the indexer's query on
#                                      the second lane), with the query on the main stream and with one stream, one
#                                      after the other on the idle
#                                      GPU (OVERLAP_ARGS: decode.py's options, default "--configs flash --depths 2,8
#                                      --batches 1,8 --steps 20 --experts 64"; OVERLAP_TESTS=0 skips the tests;
#                                      OVERLAP_SPECS: the runs, "name|knobs" separated by ";")
#
# Run from the repository root. Logs go to $OUT as <stage>-*.txt beside env.txt (date, versions, device, clocks):
# commit the ones BENCHMARKS.md cites under benchmarks/results/h200-<date>-run<N>-*. The extension build is
# cached per machine (TORCH_EXTENSIONS_DIR): a fresh machine spends about 80 s on it in `check`.
set -u
STAGES="check flash tests memcheck targets speculative spec-bench kernels decode profile floor fuse drift thirdparty ncu ab cutedsl cutedsl-bench bf16 candidates experts overlap"
# every stage named is checked before anything runs: a typo fails at once (exit 2), not after the stages before it
for stage in "${@:-check}"; do
  case " $STAGES " in *" $stage "*) ;; *)
    echo "h200.sh: unknown stage '$stage': expected one of: $STAGES" >&2; exit 2 ;; esac
done
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
PP=$(mktemp -d); ln -sfn "$PWD/kernels" "$PP/dsv4_kernels"        # kernels/ importable as dsv4_kernels, no install
export PYTHONPATH=$PWD:$PP:${PYTHONPATH:-} DSV4_CACHE_DIR=/tmp/dsv4 PYTHONUNBUFFERED=1 GRAPHCHECK_CACHE_DIR=/tmp/gc
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-/root/torch_ext}
python - <<'PY' 2>&1 | tee "$OUT/env.txt"
import datetime, sys, torch
try:
    import triton; tv = triton.__version__
except Exception as e:  # noqa: BLE001
    tv = f"none ({e.__class__.__name__})"
print(datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="minutes"), "python", sys.version.split()[0],
      "torch", torch.__version__, "cuda", torch.version.cuda, "triton", tv,
      torch.cuda.get_device_name() if torch.cuda.is_available() else "no CUDA device")
PY
nvidia-smi --query-gpu=clocks.sm,clocks.mem,clocks.max.sm --format=csv,noheader >> "$OUT/env.txt" 2>&1

# run LOG SECONDS CMD...: the command under a timeout, its output in $OUT/LOG and its exit status as the log's
# last line ("exit 124": timed out); a non-zero status makes the script's own exit status 1
run() {
  local log=$1 secs=$2; shift 2
  timeout "$secs" "$@" > "$OUT/$log" 2>&1; local rc=$?
  echo "exit $rc" >> "$OUT/$log"; [ $rc = 0 ] || echo "$log" >> "$OUT/.failed"
}
# sharded PREFIX SECONDS N CMD...: the test ids in $OUT/PREFIX.ids round-robin to N processes side by side, each
# `CMD... @<its ids>` (a pytest command line) logging $OUT/PREFIX-<i>.txt; a shard with no ids is not run (a bare
# pytest would run every test under the root)
sharded() {
  local prefix=$1 secs=$2 n=$3; shift 3
  for i in $(seq 0 $((n - 1))); do
    awk -v n="$n" -v i="$i" 'NR % n == i' "$OUT/$prefix.ids" > "$OUT/$prefix.ids.$i"
    [ -s "$OUT/$prefix.ids.$i" ] || continue
    run "$prefix-$i.txt" "$secs" "$@" "@$OUT/$prefix.ids.$i" &
  done
  wait
}
# kernel_shards PREFIX SECONDS N [PYTEST-ARGS...]: the non-slow kernel tests in N `sharded` processes; the collection
# logs to $OUT/PREFIX-collect.txt (an import error or a -k that selects nothing fails there, and no shard runs)
kernel_shards() {
  local prefix=$1 secs=$2 n=$3; shift 3
  run "$prefix-collect.txt" 120 python -m pytest -q --co -p no:cacheprovider -m "not slow" tests/kernels "$@"
  grep "::" "$OUT/$prefix-collect.txt" > "$OUT/$prefix.ids"
  if [ ! -s "$OUT/$prefix.ids" ]; then
    echo "no kernel tests collected" >> "$OUT/$prefix-collect.txt"
    return
  fi
  sharded "$prefix" "$secs" "$n" python -X faulthandler -m pytest -q -rfE -p no:cacheprovider
}
# build LOG SECONDS: the CUDA extension (cached per machine), its line in $OUT/LOG
build() { run "$1" "$2" python -c "from dsv4_kernels.moe_gemv import cuda_kernel as c; print('cuda build:', c.build())"; }
# flash_tests LOG SECONDS: the Flash-dimension CUDA tests (about 25 GB each: alone on the GPU)
flash_tests() {
  run "$1" "$2" python -m pytest -q -rfEP -p no:cacheprovider -m cuda tests --ignore=tests/kernels \
    -k "flash_dims and not official_numerics_flash"
}
# decode_runs PREFIX SECONDS PATTERN "DECODE ARGS" "NAME|KNOBS"...: benchmarks/decode.py once per spec, one after the
# other on the idle GPU, each log $OUT/PREFIX-NAME.txt; prints the lines matching PATTERN
decode_runs() {
  local prefix=$1 secs=$2 pattern=$3 args=$4 spec name cand; shift 4
  for spec in "$@"; do
    name=${spec%%|*}; cand=${spec#*|}
    run "$prefix-$name.txt" "$secs" python benchmarks/decode.py $args $cand
    echo "== $name $cand"; grep -hE "$pattern" "$OUT/$prefix-$name.txt"
  done
}
# knob_ab STAGE TESTS SPECS "DECODE ARGS" PYTEST-ARGS...: the extension build, the stage's CUDA tests (TESTS=0: not),
# then decode.py once per "name|knobs" spec of SPECS (separated by ";"), one after the other on the idle GPU
knob_ab() {
  local stage=$1 tests=$2 specs=$3 args=$4 runs; shift 4
  build "$stage-build.txt" 150
  grep -E "build|exit" "$OUT/$stage-build.txt"
  if [ "$tests" = 1 ]; then
    run "$stage-tests.txt" 240 python -m pytest -q -rfE -p no:cacheprovider "$@"
    summary "$stage-tests.txt"
  fi
  IFS=';' read -ra runs <<< "$specs"
  decode_runs "$stage-depth" 170 "^ *[0-9]+ +[0-9.]+ |hit per layer|Error|^exit" "$args" "${runs[@]}"
}
summary() { for f in "$@"; do echo "== $f"; grep -E "^FAILED|^ERROR|Fatal|Segmentation|ERROR SUMMARY|passed|failed|^exit" "$OUT/$f" | tail -25; done; }
rm -f "$OUT/.failed"

for stage in "${@:-check}"; do
  echo "#### $stage $(date -u +%H:%M:%S)"
  case $stage in
  check)
    build check-build.txt 200
    grep -E "build|exit" "$OUT/check-build.txt"
    # the slow tests are CPU work (the Triton interpreter, the sm_90 build): CPU CI runs them
    # CHECK_K: only the kernel tests it selects (pytest -k; the whole set has outgrown 330 s beside the rest on the H200)
    # in KERNEL_SHARDS (2) processes: in one they outgrew 330 s beside the rest on the H200 (run 88); four shards
    # alone took 90 s each (run 89)
    kernel_shards check-pytest-kernels 330 "${KERNEL_SHARDS:-2}" ${CHECK_K:+-k "$CHECK_K"} &
    # the Flash-dimension tests hold ~25 GB each: beside the numerics script (~50 GB) they ran out of an H100's 80 GB
    # (run 49), so they run after it, alone
    run check-pytest-cuda.txt 330 python -m pytest -q -rfEP -p no:cacheprovider -m cuda tests --ignore=tests/kernels \
      -k "not official_numerics_flash and not flash_dims" &
    # issue 36's gate (the test above leaves out its pytest twin): graph-safe vs reference on this GPU, both pairs
    run check-numerics.txt 420 python benchmarks/official_numerics.py --steps 320 &
    run check-capture-graphsafe.txt 240 python -m graphcheck capture dsv4_model.target:graphsafe_decode --device cuda \
      --config graphcheck-graphsafe.toml --output-format full &
    wait
    # CHECK_FLASH=0 leaves them out (4 minutes; a call that must fit more work beside the check)
    if [ "${CHECK_FLASH:-1}" != 0 ]; then
      flash_tests check-pytest-flash.txt 240
      summary check-pytest-flash.txt
    fi
    summary $(cd "$OUT" && ls check-pytest-kernels-*.txt) check-pytest-cuda.txt check-capture-graphsafe.txt
    grep -vE "^\s*$|Warning|warn" "$OUT/check-numerics.txt" | tail -16 ;;
  flash)
    build flash-build.txt 200
    flash_tests flash-pytest.txt 300
    summary flash-build.txt flash-pytest.txt ;;
  tests)
    build tests-build.txt 200
    # word-split as the shell would: TESTS_ARGS="tests/kernels -k 'bf16 or topk'" keeps the quoted -k in one piece
    eval "set -- ${TESTS_ARGS:-tests/kernels}"
    if [ "${TESTS_NUMERICS:-0}" = 1 ]; then      # issue 36's gate beside them, as `check` runs it
      run tests-numerics.txt 420 python benchmarks/official_numerics.py --steps 320 ${NUMERICS_ARGS:-} &
    fi
    run tests.txt 500 python -m pytest -q -rfE -p no:cacheprovider "$@"
    wait
    summary tests-build.txt tests.txt
    [ "${TESTS_NUMERICS:-0}" = 1 ] && grep -vE "^\s*$|Warning|warn" "$OUT/tests-numerics.txt" | tail -16 ;;
  memcheck)
    # one sanitizer process took over 6 minutes for the ~300 parity tests (run 12: cut off at 291): the test ids go
    # round-robin to MEMCHECK_SHARDS processes side by side (the sanitizer's instrumentation is CPU-bound)
    python -m pytest -q -p no:cacheprovider --collect-only tests/kernels/test_kernels.py -k "${MEMCHECK_K:-parity and not flash}" \
      | grep "::" > "$OUT/memcheck-pytest.ids"
    n=${MEMCHECK_SHARDS:-4}
    sharded memcheck-pytest 500 "$n" compute-sanitizer --tool memcheck --print-limit 20 --error-exitcode 3 \
      python -m pytest -q -p no:cacheprovider
    echo "$(wc -l < "$OUT/memcheck-pytest.ids") test ids in $n shards"
    summary $(cd "$OUT" && ls memcheck-pytest-*.txt)
    # one log: the device tool returns only a few files per call (run 2 of 2026-12-04 lost the shards' logs)
    for i in $(seq 0 $((n - 1))); do echo "#### shard $i"; cat "$OUT/memcheck-pytest.ids.$i" "$OUT/memcheck-pytest-$i.txt"; done \
      > "$OUT/memcheck-pytest.txt"
    rm -f "$OUT"/memcheck-pytest.ids* "$OUT"/memcheck-pytest-*.txt ;;
  targets)
    # every capture target the kernel records name (dsv4_kernels/_record.py), not a list kept by hand
    for t in $(python -c "from dsv4_kernels import targets; print(' '.join(targets.names()))"); do
      echo "== capture dsv4_kernels.targets:$t"
      timeout 60 python -m graphcheck capture "dsv4_kernels.targets:$t" --device cuda 2>&1 | grep -E "GC0|clean|passed|Error" | cut -c1-220
    done > "$OUT/targets-capture.txt" 2>&1
    grep -c "passed" "$OUT/targets-capture.txt" ;;
  speculative)
    build spec-build.txt 200
    grep -E "build|exit" "$OUT/spec-build.txt"
    run spec-rows.txt 300 python benchmarks/row_invariance.py --device cuda --configs tiny,flash --batches 1,2,4,8 --k 2 &
    # both verifies' CUDA tests (SPEC_K narrows them, e.g. "batched")
    run spec-pytest.txt 420 python -m pytest -q -rfEP -p no:cacheprovider -m cuda tests/dsv4_model/test_speculative.py \
      -k "${SPEC_K:-}" &
    spec_targets="speculative_decode speculative_batched"
    for t in $spec_targets; do
      run "spec-capture-$t.txt" 240 python -m graphcheck capture "dsv4_model.target:$t" --device cuda \
        --config graphcheck-graphsafe.toml --output-format full &
    done
    wait
    summary spec-pytest.txt $(for t in $spec_targets; do echo "spec-capture-$t.txt"; done)
    cat "$OUT/spec-rows.txt" ;;
  spec-bench)
    run spec-bench.txt 540 python benchmarks/decode.py --speculative 2 ${SPEC_ARGS:---configs tiny,flash --batches 1,8 --steps 20}
    grep -vE "^\s*$|Warning|warn" "$OUT/spec-bench.txt" | tail -24 ;;
  kernels)
    run kernels.txt 540 python benchmarks/kernels.py ${KERNELS_ARGS:-} --json "$OUT/kernels.json"
    grep -E "kernel|CUDA|copy|FAIL|Error" "$OUT/kernels.txt" | head -60 ;;
  decode)
    run decode.txt 540 python benchmarks/decode.py ${DECODE_ARGS:---compile-rows tiny:1,tiny:8,flash:1 --compile-budget 220}
    grep -vE "^\s*$|Warning|warn" "$OUT/decode.txt" | tail -14 ;;
  profile)
    run profile.txt 300 python benchmarks/decode.py --configs flash --batches 1,8 --no-compile --profile --steps 20
    grep -E "^flash |config|bandwidth|Error|decoder step|sampler" "$OUT/profile.txt" ;;
  floor)
    # the extension first (about 80 s on a fresh machine, cached after): the decode's kernels need it
    # FLOOR_ONLY: some of tests,kernels,depth,profile (default all; a 10-minute call fits tests+kernels or depth+profile)
    only=",${FLOOR_ONLY:-tests,kernels,depth,profile},"
    build floor-build.txt 150
    grep -E "build|exit" "$OUT/floor-build.txt"
    if [[ $only == *,tests,* ]]; then
      run floor-tests.txt 90 python -m pytest -q -rfE -p no:cacheprovider tests/kernels -k "bf16_linear or bf16_weights or mhc_pre_norm"
      summary floor-tests.txt; fi
    if [[ $only == *,kernels,* ]]; then
      run floor-kernels.txt 120 python benchmarks/kernels.py --only bf16 --json "$OUT/floor-kernels.json"
      grep -E "bf16_linear|FAILED|^exit" "$OUT/floor-kernels.txt"; fi
    if [[ $only == *,depth,* ]]; then
      run floor-depth.txt 300 python benchmarks/decode.py --depths 2,8 --batches 1,8,32 --steps 30 ${FLOOR_ARGS:-}
      grep -E "^ *[0-9]+ +[0-9.]+ |depths|bandwidth|LM head|Error|^exit" "$OUT/floor-depth.txt"; fi
    if [[ $only == *,profile,* ]]; then
      run floor-profile.txt 150 python benchmarks/decode.py --depths 2,3 --batches 1,8 --steps 10 --layer-profile 1,2 ${FLOOR_ARGS:-}
      grep -E "^== layer|weight-streaming|projected|Error|^exit" "$OUT/floor-profile.txt"; fi ;;
  fuse)
    only=",${FUSE_ONLY:-tests,ab,depth},"
    build fuse-build.txt 150 &
    if [[ $only == *,tests,* ]]; then
      run fuse-tests.txt 300 python -m pytest -q -rfE -p no:cacheprovider -m cuda tests/kernels/test_kernels.py \
        -k "head_norm_rope or norm_rope_fp8 or fp8_nope or mhc_pre_norm or compressor_ring or compressor_pool or record or moe_route or row_sum or swiglu_fp8 or fake_quant_parity or hadamard_fp4 or attention" &
      for t in head_norm_rope norm_rope_fp8_kv norm_rope_fp8_entry fp8_nope mhc_pre_norm ring_write close_block compressor_pool_csa compressor_pool_hca moe_route moe_route_hash swiglu_fp8 fp8_fake_quant hadamard_fp4_q hadamard_fp4_entry fp4_fake_quant decode_attention decode_attention_ring; do
        echo "== capture dsv4_kernels.targets:$t"
        timeout 90 python -m graphcheck capture "dsv4_kernels.targets:$t" --device cuda 2>&1 | grep -E "GC0|clean|passed|Error" | cut -c1-220
      done > "$OUT/fuse-capture.txt" 2>&1
    fi
    wait
    grep -E "build|exit" "$OUT/fuse-build.txt"
    [[ $only == *,tests,* ]] && { summary fuse-tests.txt; cat "$OUT/fuse-capture.txt"; }
    if [[ $only == *,ab,* ]]; then
      run fuse-ab.txt 240 python benchmarks/fuse_ab.py
      grep -vE "^\s*$|Warning|warn" "$OUT/fuse-ab.txt" | tail -90; fi
    if [[ $only == *,depth,* ]]; then
      run fuse-depth.txt 470 python benchmarks/fuse_ab.py --depth-only --depth-timeout 230 --depth-unfused "${FUSE_UNFUSED:-all}"
      grep -A4 -E "^ *B +layer ms fused" "$OUT/fuse-depth.txt"; grep -E "^  flash depth|^exit|Error" "$OUT/fuse-depth.txt"; fi ;;
  drift)
    run drift.txt 300 python benchmarks/kernel_drift.py ${DRIFT_ARGS:-}; tail -30 "$OUT/drift.txt" ;;
  thirdparty)
    run thirdparty-cuda.log 400 python benchmarks/thirdparty_verdicts.py --device cuda --out "$OUT/thirdparty-cuda.md"
    tail -15 "$OUT/thirdparty-cuda.md" 2>/dev/null || tail -5 "$OUT/thirdparty-cuda.log" ;;
  ncu)
    run ncu-gemv.txt 200 ncu --kernel-name regex:'fp4_rows|mma_gemv' --launch-skip 4 --launch-count 2 --section SpeedOfLight \
      --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats python benchmarks/ncu_gemv.py
    grep -E "fp4_rows|mma_gemv|Throughput|Issued Warp|Achieved Active" "$OUT/ncu-gemv.txt" | cut -c1-120 ;;
  ab)
    run ab.txt 560 python benchmarks/kernel_ab.py ${AB_ARGS:-}
    grep -vE "^\s*$|Warning|warn" "$OUT/ab.txt" | tail -30 ;;
  cutedsl)
    export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages:$PYTHONPATH
    run cutedsl-pytest.txt 330 python -m pytest -q -rfE -p no:cacheprovider tests/kernels/test_cutedsl.py \
      tests/graphcheck/test_cutedsl_runtime.py &
    # --report-api-errors no: run 45's 34 "errors" were cuda-python probing driver entry points (every printed one a
    # cuGetProcAddress_v2 returning CUDA_ERROR_INVALID_VALUE), no memory access; memory errors still fail the stage
    run cutedsl-memcheck.txt 330 compute-sanitizer --tool memcheck --report-api-errors no --print-limit 20 --error-exitcode 3 \
      python -m pytest -q -p no:cacheprovider tests/kernels/test_cutedsl.py -k "gather_picks or clamps or parity and 5-4-2" &
    wait
    run cutedsl-checks.txt 200 python benchmarks/cutedsl.py --out "$OUT" --only mutation,hazards
    summary cutedsl-pytest.txt cutedsl-memcheck.txt
    grep -E "^==|CAUGHT|MISSED|CLEAN|FINDINGS|clamp order" "$OUT/cutedsl-checks.txt" ;;
  cutedsl-bench)
    export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages:$PYTHONPATH
    build cutedsl-build.txt 200
    run cutedsl-bench.txt 380 python benchmarks/cutedsl.py --out "$OUT" --only ${CUTEDSL_ONLY:-capture,ab}
    grep -E "^==|clean|FINDINGS|^\|" "$OUT/cutedsl-bench.txt" ;;
  bf16)
    # a reused $OUT must not hand an earlier run's best shape to this one's decode
    rm -f "$OUT"/bf16-best.txt "$OUT"/bf16-depth-*.txt
    build bf16-build.txt 120
    run bf16-sweep.txt 150 python benchmarks/bf16_sweep.py --f32 --best "$OUT/bf16-best.txt"
    grep -vE "Warning|warn" "$OUT/bf16-sweep.txt" | grep -E "^==|^  |best"
    [ "${BF16_DEPTH:-1}" = 0 ] && continue          # the sweep only (a call that fits other work beside it)
    args=${BF16_ARGS:---configs flash --depths 2,8 --batches 1,8 --steps 20 --experts 64}
    run bf16-depth-default.txt 150 python benchmarks/decode.py $args
    if [ -s "$OUT/bf16-best.txt" ]; then
      run bf16-depth-best.txt 150 python benchmarks/decode.py $args --bf16-shape "$(cat "$OUT/bf16-best.txt")"
    fi
    grep -hE "^ *[0-9]+ +[0-9.]+ |depths|bf16 GEMV|Error|^exit" "$OUT"/bf16-depth-*.txt ;;
  candidates)
    # the attention's two launches' (their ring bit for bit their list, near the one launch) and the joined
    # projections' (both decodes bit for bit over joins) CUDA tests, then the default decode against each choice
    # flipped (one launch, projections apart), one after the other on the idle GPU
    build candidates-build.txt 120
    if [ "${CANDIDATE_TESTS:-1}" = 1 ]; then   # CANDIDATE_TESTS=0: the decodes alone (the tests ran in an earlier call)
      run candidates-tests.txt 150 python -m pytest -q -rfE -p no:cacheprovider tests/kernels/test_kernels.py \
        tests/dsv4_model/test_graphsafe.py -k "two_launches or ring_is_the_list or cuda_joined"
      summary candidates-tests.txt
    fi
    args=${CANDIDATE_ARGS:---configs flash --depths 2,8 --batches 1 --steps 20 --experts 64}
    decode_runs candidates-depth 130 "^ *[0-9]+ +[0-9.]+ |Error|^exit" "$args" "default|" \
      "one-launch|--knob dsv4_kernels.attention.triton_kernel.PV_COLS=0" \
      "separate|--knob dsv4_model.linear.JOIN_PROJECTIONS=False" ;;
  experts)
    knob_ab experts "${EXPERTS_TESTS:-1}" \
      "${EXPERTS_SPECS:-"pairs-first|;tiles-first|--knob dsv4_kernels.moe_gemv.cuda_kernel.EXPERTS_PAIRS_FIRST=False;pairs-first-one-launch|--knob dsv4_kernels.attention.triton_kernel.PV_COLS=0"}" \
      "${EXPERTS_ARGS:---configs flash --depths 2,8 --batches 1,8 --steps 20 --experts 64}" tests/kernels/test_kernels.py \
      -k "routed_experts_mma_pairs_first or routed_experts_parity or routed_experts_flash_size" ;;
  overlap)
    knob_ab overlap "${OVERLAP_TESTS:-1}" \
      "${OVERLAP_SPECS:-"side-streams|;query-on-main|--knob dsv4_model.decode.QUERY_ON_SIDE=False;one-stream|--knob dsv4_model.decode.OVERLAP=False"}" \
      "${OVERLAP_ARGS:---configs flash --depths 2,8 --batches 1,8 --steps 20 --experts 64}" -m cuda \
      tests/dsv4_model/test_graphsafe.py -k "side_stream or cuda_replay_bitwise_tiny or cuda_capture_of_graphsafe" ;;
  *) echo "h200.sh: stage '$stage' is in STAGES but has no case" >&2; exit 2 ;;
  esac
done
if [ -s "$OUT/.failed" ]; then echo "h200.sh: non-zero exit in: $(tr '\n' ' ' < "$OUT/.failed")" >&2; exit 1; fi
