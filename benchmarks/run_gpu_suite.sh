#!/usr/bin/env bash
# Every GPU benchmark of the project in one device call; results land in $OUT (the device tool
# copies them back). Run from the repo root on the GPU machine:
#   bash benchmarks/run_gpu_suite.sh [kernels snake decoder talker vocoder-service talker-service e2e e2e-2gpu]
# (default: all but e2e-2gpu / e2e-4gpu / e2e-4gpu-shared, which need two / four GPUs). Pieces:
#   kernels                  the Triton kernel tests on the GPU (their CUDA-only cases: bit-equality
#                            with torch's CUDA ops, CUDA-graph capture), before anything is timed
#   snake, decoder, talker   kernels, decoder step, talker step (foundation + talker-model issues)
#   vocoder-service          vocoder engine + runner at 1/4/16/64/128 streams, eager vs graphs (+compile)
#   conv-layouts             the decoder's convs on cuDNN as [B, C, T] vs time-major channels-last views,
#                            heuristic vs timed algorithm picks (benchmarks/bench_conv_layouts.py)
#   decoder-profile          top kernels and top ATen ops of eager vocoder steps (PROFILE_SHAPES, 64x25)
#   talker-service           talker decode step through the service runner's graphs, batch 1..256
#   talker-profile           kernels of the talker step's captured graph at PROFILE_BATCHES (1,64,256):
#                            kernel time vs replay time, top kernels, ATen ops of an eager step
#   talker-ab                the talker step's graph (profile_talker.py at PROFILE_BATCHES) of the tree in
#                            build/base.tar (scripts/ab_base.sh COMMIT; carry "build") against this one,
#                            alternated AB_ROUNDS (2) times, on one machine: talker-ab.log + JSONs
#   pdl-ab                   programmatic dependent launch (kernels/pdl.py): a kernel boundary's cost
#                            alone (benchmarks/bench_pdl.py), then the talker step's graph at
#                            PROFILE_BATCHES with QWEN3_TTS_PDL=0 against the default (PDL where the
#                            GEMMs are the few-row kernel, graphs.captures_with_pdl), alternated twice
#   deferred-norm-ab         the talker step's graph at PROFILE_BATCHES with QWEN3_TTS_DEFERRED_NORM=0 (a
#                            norm launch before every q/k/v and gate/up GEMM) against the default (norm
#                            weights folded into those GEMMs, residual adds in o_proj/down_proj; see
#                            talker_service/model/layers.py), alternated AB_ROUNDS (2) times
#   fused-attention-ab       the talker step's graph at PROFILE_BATCHES with QWEN3_TTS_FUSED_ATTENTION=0 (q/k-norm +
#                            RoPE + KV write, then the attention: two launches a layer pass) against the
#                            default (one launch, kernels/norm_rope_attend.py), alternated AB_ROUNDS (2) times
#   cublaslt-algos           the decode GEMMs (talker, predictor; M = CUBLASLT_BATCHES, 256,128,64): torch's
#                            cuBLAS call against every algorithm of cuBLASLt's heuristic list and split-K
#                            variants (benchmarks/probe_cublaslt_algos.py, kernels/cublaslt.py)
#   gemm-tuning-ab           the talker step's graph at PROFILE_BATCHES with QWEN3_TTS_GEMM_TUNING=0 (torch's cuBLAS
#                            call for every GEMM) against the default (per-shape cuBLASLt algorithm choice at
#                            capture, kernels/gemm_tuning.py), alternated AB_ROUNDS (2) times
#   qkv-tables-ab            the talker step's graph at PROFILE_BATCHES with QWEN3_TTS_QKV_TABLES=0 (the code
#                            predictor's layer 0 projects each step's input) against the default (its q/k/v
#                            looked up in tables built at init, CodePredictor._qkv_tables), AB_ROUNDS (2) times
#   silu-mul-norm            the SwiGLU launch with the deferred norm's 1/rms against the plain one, and a
#                            (BLOCK, warps) sweep of it at the decode shapes (benchmarks/bench_silu_mul_norm.py)
#   vocoder-layouts          the decoder channel-major vs time-major (QWEN3_TTS_VOCODER_LAYOUT): an eager
#                            64x25 step's kernels and the service path at VOCODER_STREAMS (64), rate 0
#   vocoder-startup          seconds from `python -m vocoder_service` to graphs ready: cold caches, then warm
#   vocoder-dtype            issue #39, per dtype of VOCODER_DTYPES (bfloat16,float16,float32) on one card: SNR of
#                            the streamed graph path against a float32 decode with TF32 off, audio-s/s at 64 and
#                            256 streams, first chunk (benchmarks/bench_vocoder_dtype.py), ~1.5 min a dtype
#   small-m-linear           the talker's decode GEMMs at 1, 2, 4 and 8 rows, cuBLAS vs the few-row Triton
#                            kernel (benchmarks/bench_small_m_linear.py), then the talker step at batch
#                            1 and 8 with QWEN3_TTS_LINEAR_TRITON=0 (cuBLAS) and 1 (kernel at <= 16 rows;
#                            unset, the default, is the kernel at 1 row only)
#   decode-kernels           the frame step's sampling (one-launch whole-row kernel vs the sort path) and slot
#                            attention (block / warp sweep) at batch 1, 64, 256 (benchmarks/bench_decode_kernels.py)
#   e2e                      gateway + talker + vocoder on GPU 0 via the launcher, concurrency 1..256
#                            (E2E_STAGGER=1: staggered starts, the steady arrivals of the e2e-4gpu sweep)
#   e2e-repeats              the stack at default flags at REPEAT_LEVELS (256) only, E2E_REPEATS (2) more times,
#                            each its own stack (e2e-repeat-N.json): the spread of one tree's throughput
#                            and host time at 256 streams, next to the e2e piece's sweep
#   e2e-ab                   same-machine A/B of the stack at default flags: the tree in build/base.tar
#                            (scripts/ab_base.sh COMMIT writes it; carry "build") against this one,
#                            alternated AB_ROUNDS (2) times at AB_LEVELS (256), each run at most
#                            AB_RUN_TIMEOUT_S (240) s (a fresh machine's first stack compiles its
#                            kernels: 150 s was too short); one line per run in ab.txt, the JSONs ab-*.json
#   http-vs-grpc             issue #37: TTFA and audio-s/s through POST /v1/audio/speech (pcm, chunked) against
#                            StreamSynthesize on one stack, alternated HTTP_ROUNDS (2) times at HTTP_LEVELS (1,64)
#   e2e-gapless              issue #36: the stack of build/base.tar (scripts/ab_base.sh COMMIT; carry "build")
#                            then this one, both driven by this tree's bench_e2e (stalls as the client hears
#                            them) at GAPLESS_LEVELS (64,256), arrivals GAPLESS_ARRIVALS (closed staggered,
#                            open-loop poisson, burst), 4 x concurrency streams a level; GAPLESS_SIDES
#                            (base head) picks the sides (one device call each fits 10 minutes); the head
#                            side is build/head.tar when there is one (scripts/ab_base.sh COMMIT head), else
#                            this tree; GAPLESS_HEAD_ARGS (bench_e2e flags, e.g. --vocoder-arg=--dtype=bfloat16)
#                            go to the head side only; any other side NAME runs the head tree with the flags
#                            in GAPLESS_ARGS_NAME, after (so over) the defaults (e.g. GAPLESS_SIDES="head window2"
#                            GAPLESS_ARGS_window2=--vocoder-arg=--step-window-s=2); GAPLESS_TRACE=1 has
#                            those sides' vocoders write the step trace; the load comes from
#                            GAPLESS_CLIENT_PROCS (4) client processes of GAPLESS_CLIENT_CHANNELS (4)
#                            connections each (the launcher's gateway workers take whole connections),
#                            Poisson levels at GAPLESS_POISSON_LOAD (1.0) x the closed loop's rate, and
#                            each level records the services' CPU: gapless.txt, gapless-SIDE.json, and
#                            gapless-logs.tgz (each side's bench log, service logs, trace and its report);
#                            gapless.txt also splits each stream's wait for the start message at the
#                            gateway's handler (benchmarks/gateway_entry_lag.py)
#   e2e-mps                  e2e with the CUDA MPS control daemon running, so talker and vocoder
#                            kernels share the GPU at once instead of time-slicing two contexts
#                            (skipped with a note when the daemon cannot start)
#   e2e-clone                the Base model on one GPU, default flags: registered voice, per-request
#                            x-vector and in-context clones (one stack), concurrency 1..64
#   e2e-design               the VoiceDesign model, voices described in words, concurrency 1..64
#   e2e-registered-vs-speaker  issue #14: a registered voice (Base, x-vector only) against a
#                            CustomVoice speaker, COMPARE_PASSES (3) passes of both, each bench_e2e
#                            starting its own stack, 4 x concurrency streams per level (at least
#                            COMPARE_MIN_STREAMS, 16); then
#                            compare_e2e_runs.py writes compare.json / compare.md; COMPARE_STAGGER=1
#                            spreads each level's first streams over a lone stream's wall time
#                            (bench_e2e --stagger-starts) instead of starting them in one burst
#   e2e-2gpu                 the multi-GPU compose file run without Docker (talker GPU 0, two
#                            vocoders GPU 1), e2e at E2E_2GPU_LEVELS (64,256) x E2E_2GPU_ARRIVALS
#                            (closed) with each vocoder's share, 4 x concurrency streams a level from
#                            GAPLESS_CLIENT_PROCS (4) client processes of GAPLESS_CLIENT_CHANNELS (16)
#                            connections, Poisson at GAPLESS_POISSON_LOAD
#                            (1.0), then vocoder-1 killed under KILL_STREAMS (128; 0: no kill)
#                            (benchmarks/replica_kill.py); E2E_2GPU_WORKERS="8 12" runs one stack per
#                            gateway-process count instead, one after the other on this machine
#                            (e2e-2gpu-w8.json, e2e-2gpu-w12.json; no kill; two counts a call: each
#                            brings back three files and the device tool eight)
#   e2e-4gpu                 issue #38: deploy/compose/four-gpu.yml (talkers GPUs 0-1, vocoders 2-3) run
#                            without Docker: seconds to SERVING (cold caches on a fresh machine), e2e at
#                            E2E_4GPU_LEVELS (64,256,512; 10 s utterances, staggered starts = steady
#                            arrivals) with each talker's and vocoder's share, then each replica of
#                            E2E_4GPU_KILLS (talker-a-1 vocoder-a-1) SIGKILLed under KILL_STREAMS and
#                            brought back by compose_run, then the stack started again (warm caches):
#                            e2e-4gpu.log (every table and timing), .json, -kill-<replica>.json,
#                            -service-logs.tgz. Too long for one 10-minute call with both kills:
#                            E2E_4GPU_KILLS="" (sweep) and E2E_4GPU_LEVELS="" E2E_4GPU_KILLS=... split it
#   e2e-4gpu-shared          the same for deploy/compose/four-gpu-shared.yml (a talker and a vocoder
#                            on each GPU; E2E_4GPU_KILLS default talker-a-1 vocoder-a-1 too)
# Service pieces need the runtime wheels the GPU image lacks (pyzmq, grpcio-health-checking, ...):
# put them in .whl/ and carry it; they are installed from there without reaching any index.
# The e2e pieces write a full-size random checkpoint (1.7B CustomVoice, about 4 GB) once.
set -uo pipefail
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/bench-out}; mkdir -p "$OUT"
CKPT=${QWEN3_TTS_BENCH_CKPT:-/tmp/qwen3-tts-1b7-random}
which=${*:-kernels snake decoder talker vocoder-service talker-service e2e}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"

install_wheels() {
  [ -d .whl ] && python3 -m pip install -q --no-index --find-links .whl .whl/*.whl 2>&1 | tail -3
}

random_checkpoint() {
  [ -f "$CKPT/config.json" ] || python3 -m checkpoint.tiny --type custom_voice --size 1b7 --out "$CKPT"
}

wait_ready() {   # file, pid, seconds
  for _ in $(seq 1 $(( $3 * 5 ))); do
    [ -f "$1" ] && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.2
  done
  return 1
}

BASE_CKPT=${QWEN3_TTS_BENCH_BASE_CKPT:-/tmp/qwen3-tts-1b7-base-random}
DESIGN_CKPT=${QWEN3_TTS_BENCH_DESIGN_CKPT:-/tmp/qwen3-tts-1b7-design-random}

base_checkpoint() {
  [ -f "$BASE_CKPT/config.json" ] || python3 -m checkpoint.tiny --type base --size 1b7 --out "$BASE_CKPT"
}

e2e_clone() {
  local ready=/tmp/clone-ready.json work=/tmp/clone-work
  base_checkpoint
  rm -f "$ready"
  python3 -m launcher --model "$BASE_CKPT" --device cuda --grpc-port 0 --work-dir "$work" --ready-file "$ready" \
    --health-timeout-s 600 > "$OUT/e2e-clone-stack.log" 2>&1 &
  local pid=$!
  if wait_ready "$ready" "$pid" 600; then
    local target
    target=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["grpc_target"])' "$ready")
    # every stream its own clip first: each request is really encoded (no cache hit)
    python3 benchmarks/bench_e2e.py --target "$target" --device cuda --workload clone-icl --distinct-clips \
      --concurrency "${CLONE_DISTINCT_LEVELS:-1,4,8,16,32}" --out "$OUT/e2e-clone-icl-distinct.json" 2>&1 \
      | tee -a "$OUT/e2e-clone.log"
    # unset: the three below; set but empty: none (only the distinct-clip level runs)
    for workload in ${CLONE_WORKLOADS-registered clone-xvector clone-icl}; do
      python3 benchmarks/bench_e2e.py --target "$target" --device cuda --workload "$workload" \
        --concurrency "${CLONE_LEVELS:-1,4,8,16,32,64}" --out "$OUT/e2e-clone-$workload.json" 2>&1 \
        | tee -a "$OUT/e2e-clone.log"
    done
  else
    echo "clone stack did not start; see $OUT/e2e-clone-stack.log" | tee "$OUT/e2e-clone.log"
  fi
  kill -TERM "$pid" 2>/dev/null; wait "$pid"
  cp "$work"/talker.log "$OUT/e2e-clone-talker.log" 2>/dev/null
}

# Issue #14 asks that a registered voice costs what a CustomVoice speaker costs (TTFA within 10% at
# every level). The two need different checkpoints, so they never share a stack: each pass runs
# one stack per workload, one after the other. One pass's level median moves by up to 20 ms
# between runs of the same code (where each burst of arrivals lands against the talker's steps),
# hence several passes, 4 x concurrency streams per level and, with COMPARE_STAGGER=1, arrivals
# spread out as in a service's steady state; the verdict is on the TTFA pooled over every stream
# of every pass.
e2e_registered_vs_speaker() {
  random_checkpoint; base_checkpoint
  rm -f "$OUT"/compare-*-pass*.json   # files of an earlier run would join this one's groups
  local pass workload model
  for pass in $(seq 1 "${COMPARE_PASSES:-3}"); do
    for workload in custom-voice registered-xvector; do
      model=$([ "$workload" = custom-voice ] && echo "$CKPT" || echo "$BASE_CKPT")
      echo "== pass $pass: $workload ($model)" | tee -a "$OUT/compare.log"
      python3 benchmarks/bench_e2e.py --model "$model" --device cuda --workload "$workload" \
        --concurrency "${COMPARE_LEVELS:-1,4,8,16,32,64}" --streams-factor "${COMPARE_STREAMS_FACTOR:-4}" \
        --min-streams "${COMPARE_MIN_STREAMS:-16}" \
        --single-repeats 16 ${COMPARE_STAGGER:+--stagger-starts} --out "$OUT/compare-$workload-pass$pass.json" 2>&1 \
        | tee -a "$OUT/compare.log"
    done
  done
  # only the passes that wrote a result (a failed one leaves no file)
  local a=("$OUT"/compare-custom-voice-pass*.json) b=("$OUT"/compare-registered-xvector-pass*.json)
  if [ -f "${a[0]}" ] && [ -f "${b[0]}" ]; then
    python3 benchmarks/compare_e2e_runs.py --a "${a[@]}" --b "${b[@]}" --a-name custom-voice \
      --b-name registered-xvector --tolerance 0.10 --out-json "$OUT/compare.json" --out-md "$OUT/compare.md" 2>&1 \
      | tee -a "$OUT/compare.log"
  else
    echo "no comparison: a workload has no finished pass; see $OUT/compare.log" | tee -a "$OUT/compare.log"
  fi
}

e2e_mps() {
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  if ! nvidia-cuda-mps-control -d > "$OUT/e2e-mps.log" 2>&1; then
    echo "MPS control daemon did not start; e2e-mps skipped" | tee -a "$OUT/e2e-mps.log"
    unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY; return
  fi
  python3 benchmarks/bench_e2e.py --model "$CKPT" --device cuda --concurrency "${E2E_LEVELS:-1,4,16,64,128,256}" \
    --out "$OUT/e2e-mps.json" 2>&1 | tee -a "$OUT/e2e-mps.log"
  echo quit | nvidia-cuda-mps-control
  cat "$CUDA_MPS_LOG_DIRECTORY"/control.log >> "$OUT/e2e-mps.log" 2>/dev/null
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
}

unpack_base() {   # DIR LOG: the A/B base tree (build/base.tar) into DIR; a note in LOG when it is missing
  if [ ! -f build/base.tar ]; then
    echo "no build/base.tar: run scripts/ab_base.sh COMMIT on the host and carry build" | tee "$2"
    return 1
  fi
  rm -rf "$1" && mkdir -p "$1" && tar -xf build/base.tar -C "$1"
}

ab_rounds() {   # RUN BASE_DIR: `RUN side round dir commit` for base then head, AB_ROUNDS (2) times
  local run=$1 base=$2 round base_commit head_commit=${QWEN3_TTS_COMMIT:-head}
  base_commit=$(cat build/base.commit 2>/dev/null || echo base)
  for round in $(seq 1 "${AB_ROUNDS:-2}"); do
    "$run" base "$round" "$base" "$base_commit"
    "$run" head "$round" "$PWD" "$head_commit"
  done
}

talker_ab_run() {   # side round dir commit: that tree's profile_talker at PROFILE_BATCHES
  (cd "$3" && QWEN3_TTS_COMMIT=$4 python3 benchmarks/profile_talker.py \
    --batch-sizes "${PROFILE_BATCHES:-1,64,256}" --out "$OUT/talker-ab-$1$2-$4.json" 2>&1 \
    | grep -E "^batch|Error" | sed "s/^/$1 $4 round $2: /" >> "$OUT/talker-ab.log")
}

env_ab() {   # VAR NAME: the talker step's graph (profile_talker.py at PROFILE_BATCHES) with VAR=0 and VAR=1,
             # alternated AB_ROUNDS (2) times: NAME-ab.log and talker-profile-NAME{0,1}-ROUND.json
  local var=$1 name=$2 round on
  for round in $(seq "${AB_ROUNDS:-2}"); do
    for on in 0 1; do
      env "$var=$on" python3 benchmarks/profile_talker.py --batch-sizes "${PROFILE_BATCHES:-1,64,256}" \
        --out "$OUT/talker-profile-$name$on-$round.json" 2>&1 | grep -E "^batch|Error" \
        | sed "s/^/${name//-/_}=$on round $round: /" >> "$OUT/$name-ab.log"
    done
  done
  cat "$OUT/$name-ab.log"
}

talker_ab() {   # the talker step's graph, base tree (build/base.tar) against this one, alternated
  unpack_base /tmp/talker-ab-base "$OUT/talker-ab.log" || return 1
  ab_rounds talker_ab_run /tmp/talker-ab-base
  cat "$OUT/talker-ab.log"
}

e2e_ab_run() {   # side round dir commit: that tree's bench_e2e and stack (both read the one checkpoint)
  (cd "$3" && QWEN3_TTS_COMMIT=$4 timeout "${AB_RUN_TIMEOUT_S:-240}" python3 benchmarks/bench_e2e.py \
    --model "$CKPT" --device cuda --concurrency "${AB_LEVELS:-256}" --out "$OUT/ab-$1$2-$4.json" \
    > "/tmp/ab-$1$2.log" 2>&1)
  echo "== $1 $4 round $2 (exit $?)" >> "$OUT/ab.txt"
  grep -A2 "^c=" "/tmp/ab-$1$2.log" >> "$OUT/ab.txt" || tail -5 "/tmp/ab-$1$2.log" >> "$OUT/ab.txt"
}

e2e_gapless_run() {   # side dir commit [bench_e2e flags]: that tree's stack, driven by this tree's bench_e2e
  # the side's flags come last, so they override the defaults here (e.g. --client-procs=16)
  local side=$1 dir=$2 commit=$3 logs="$OUT/gapless-logs" work; shift 3
  mkdir -p "$logs"
  QWEN3_TTS_COMMIT=$commit timeout "${GAPLESS_RUN_TIMEOUT_S:-540}" python3 benchmarks/bench_e2e.py --stack-dir "$dir" \
    --model "$CKPT" --device "${GAPLESS_DEVICE:-cuda}" --concurrency "${GAPLESS_LEVELS:-64,256}" \
    --arrivals "${GAPLESS_ARRIVALS:-closed,poisson,burst}" --stagger-starts --streams-factor 4 \
    --single-repeats "${GAPLESS_SINGLE_REPEATS:-2}" --frames "${GAPLESS_FRAMES:-125}" \
    --poisson-load "${GAPLESS_POISSON_LOAD:-1.0}" \
    --client-procs "${GAPLESS_CLIENT_PROCS:-4}" --client-channels "${GAPLESS_CLIENT_CHANNELS:-4}" \
    --out "$OUT/gapless-$side.json" "$@" > "$logs/gapless-$side.log" 2>&1
  echo "== $side $commit (exit $?) $*" >> "$OUT/gapless.txt"
  grep -E "^c=|stalls > |cpu %|server p50|hops p50|^first request" "$logs/gapless-$side.log" >> "$OUT/gapless.txt" \
    || tail -5 "$logs/gapless-$side.log" >> "$OUT/gapless.txt"
  # the stack's own logs (bench_e2e leaves its work dir) and the vocoder's step trace, if it wrote one
  work=$(ls -td /tmp/bench-e2e-* 2>/dev/null | head -1)
  for f in vocoder talker gateway; do [ -n "$work" ] && [ -f "$work/$f.log" ] && cp "$work/$f.log" "$logs/$side-$f.log"; done
  # each stream's way to the gateway's handler, and the rest of its wait for the start message
  [ -f "$logs/$side-gateway.log" ] && python3 benchmarks/gateway_entry_lag.py "$OUT/gapless-$side.json" \
    "$logs/$side-gateway.log" >> "$OUT/gapless.txt" 2>&1
  if [ -f "$logs/$side-trace.jsonl" ]; then
    python3 benchmarks/step_trace_report.py "$logs/$side-trace.jsonl" --split-idle-s 1 > "$logs/$side-trace-report.txt" 2>&1
    gzip -f "$logs/$side-trace.jsonl"
  fi
}

e2e_gapless() {
  # sides: base (build/base.tar), head (build/head.tar or this tree, GAPLESS_HEAD_ARGS), or any other
  # NAME: the head tree again with the bench_e2e flags in GAPLESS_ARGS_NAME (an A/B of a flag on one
  # machine). GAPLESS_TRACE=1: every side but base writes the vocoder's step trace; GAPLESS_HOPS=1: every
  # side marks its requests' first-audio hops (service_common/hop_trace.py). The per-side logs,
  # the services' logs and the traces go into one archive, gapless-logs.tgz (the device tool brings
  # back at most 8 files): gpu.txt, gapless.txt, a JSON per side and that archive.
  local side head_dir head_commit args var trace
  rm -rf "$OUT/gapless-logs"
  if [ -f build/head.tar ]; then
    rm -rf /tmp/gapless-head && mkdir -p /tmp/gapless-head && tar -xf build/head.tar -C /tmp/gapless-head
    head_dir=/tmp/gapless-head head_commit=$(cat build/head.commit)
  else
    head_dir=$PWD head_commit=${QWEN3_TTS_COMMIT:-head}
  fi
  for side in ${GAPLESS_SIDES:-base head}; do
    trace=""
    [ "${GAPLESS_TRACE:-0}" = 1 ] && trace="--vocoder-arg=--step-trace=$OUT/gapless-logs/$side-trace.jsonl"
    # GAPLESS_HOPS=1: each request's way to first audio, hop by hop (a tree from before the marks has none)
    [ "${GAPLESS_HOPS:-0}" = 1 ] && trace="$trace --hop-trace-dir=$OUT/gapless-logs/$side-hops"
    if [ "$side" = base ]; then
      unpack_base /tmp/gapless-base "$OUT/gapless.txt" || return 1
      e2e_gapless_run base /tmp/gapless-base "$(cat build/base.commit 2>/dev/null || echo base)"
    elif [ "$side" = head ]; then
      e2e_gapless_run head "$head_dir" "$head_commit" ${GAPLESS_HEAD_ARGS:-} $trace
    else
      var="GAPLESS_ARGS_$side"
      args=${!var:-}
      [ -n "$args" ] || echo "side $side: GAPLESS_ARGS_$side is empty, so it runs as head" >> "$OUT/gapless.txt"
      e2e_gapless_run "$side" "$head_dir" "$head_commit" $args $trace
    fi
  done
  tar czf "$OUT/gapless-logs.tgz" -C "$OUT" gapless-logs && rm -rf "$OUT/gapless-logs"
  cat "$OUT/gapless.txt"
}

e2e_ab() {
  unpack_base /tmp/ab-base "$OUT/ab.txt" || return 1
  ab_rounds e2e_ab_run /tmp/ab-base
  cat "$OUT/ab.txt"
}

e2e_two_gpus() {
  # issue #13: the sweep through the compose stack (per-replica load split per level), then one
  # vocoder replica SIGKILLed under KILL_STREAMS streams (benchmarks/replica_kill.py: how its streams
  # end, where new ones go, its restart by compose_run and its return to service).
  # E2E_2GPU_WORKERS="8 12": one stack per gateway-process count on this machine, one after the
  # other (e2e-2gpu-w8.json, ...; no kill), so the counts compare on one machine
  if [ -n "${E2E_2GPU_WORKERS:-}" ]; then
    local workers
    for workers in $E2E_2GPU_WORKERS; do
      echo "== gateway workers $workers" | tee -a "$OUT/e2e-2gpu.log"
      QWEN3_TTS_GATEWAY_WORKERS=$workers KILL_STREAMS=0 e2e_two_gpus_stack "-w$workers"
    done
  else
    e2e_two_gpus_stack ""
  fi
}

e2e_two_gpus_stack() {   # output suffix: one compose stack, its sweep and (KILL_STREAMS > 0) the kill
  local ready=/tmp/compose-ready.json work=/tmp/compose-work suffix=$1 hops=""
  rm -rf "$ready" "$work"
  # GAPLESS_HOPS=1: every replica marks its requests' first-audio hops (compose_run passes its own
  # environment on); the sweep reports them per level and the marks go into the service-logs archive
  [ "${GAPLESS_HOPS:-0}" = 1 ] && hops="$work/hops"
  QWEN3_TTS_MODEL=$CKPT QWEN3_TTS_HOP_TRACE_DIR=$hops python3 -m launcher.compose_run deploy/compose/multi-gpu.yml \
    --work-dir "$work" --ready-file "$ready" --health-timeout-s 600 > "$OUT/e2e-2gpu$suffix-stack.log" 2>&1 &
  local pid=$!
  if wait_ready "$ready" "$pid" 600; then
    # the gapless piece's load: 4 x concurrency streams a level from GAPLESS_CLIENT_PROCS processes
    # of GAPLESS_CLIENT_CHANNELS (16) connections: the compose gateway runs 8 workers, which take
    # whole connections, so 4 a process would leave some workers one or two; E2E_2GPU_ARRIVALS modes
    python3 benchmarks/bench_e2e.py --compose-ready "$ready" --concurrency "${E2E_2GPU_LEVELS:-64,256}" \
      ${E2E_STAGGER:+--stagger-starts} --arrivals "${E2E_2GPU_ARRIVALS:-closed}" --streams-factor 4 \
      --poisson-load "${GAPLESS_POISSON_LOAD:-1.0}" \
      --client-procs "${GAPLESS_CLIENT_PROCS:-4}" --client-channels "${GAPLESS_CLIENT_CHANNELS:-16}" \
      ${hops:+--hop-trace-dir "$hops"} --out "$OUT/e2e-2gpu$suffix.json" 2>&1 | tee -a "$OUT/e2e-2gpu.log"
    [ "${KILL_STREAMS:-128}" = 0 ] || python3 benchmarks/replica_kill.py --compose-ready "$ready" --kill vocoder-1 --streams "${KILL_STREAMS:-128}" \
      --frames "${KILL_FRAMES:-250}" --kill-after-s "${KILL_AFTER_S:-1}" --rejoin-timeout-s "${KILL_REJOIN_TIMEOUT_S:-240}" \
      --out "$OUT/replica-kill.json" 2>&1 | tee "$OUT/replica-kill.log"
  else
    echo "compose stack did not start; see $OUT/e2e-2gpu$suffix-stack.log" | tee -a "$OUT/e2e-2gpu.log"
  fi
  kill -TERM "$pid" 2>/dev/null; wait "$pid"
  # one archive a stack: the device tool brings back at most 8 files
  tar czf "$OUT/e2e-2gpu$suffix-service-logs.tgz" -C "$work" --exclude volumes . 2>/dev/null
}

compose_up() {   # compose file, work dir, ready file, log: starts the stack (COMPOSE_PID); UP_S = seconds to ready
  rm -rf "$3"
  local t0; t0=$(date +%s.%N)
  QWEN3_TTS_MODEL=$CKPT python3 -m launcher.compose_run "$1" --work-dir "$2" --ready-file "$3" \
    --health-timeout-s 600 >> "$4" 2>&1 &
  COMPOSE_PID=$!
  wait_ready "$3" "$COMPOSE_PID" 600 || return 1
  UP_S=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$t0" "$(date +%s.%N)")
}

e2e_four_gpus() {   # compose file, tag (e2e-4gpu | e2e-4gpu-shared)
  # issue #38: the scaling run's four-GPU row and the talker kill; the 1- and 2-GPU rows of the same
  # load come from the e2e and e2e-2gpu pieces with E2E_LEVELS / E2E_2GPU_LEVELS and --stagger-starts
  # Kernel caches (Triton, the vocoder's compile cache) live in this user's home on a bare host, so the
  # first start on a fresh machine is the cold case and the restart after the runs the warm one.
  local file=$1 tag=$2 ready=/tmp/compose4-ready.json work=/tmp/compose4-work victim
  local log="$OUT/$tag.log"
  rm -rf "$work"; mkdir -p "$work"
  if ! compose_up "$file" "$work/cold" "$ready" "$work/stack.log"; then
    echo "compose stack did not start; see the stack log in $tag-service-logs.tgz" | tee -a "$log"
  else
    echo "$tag: every replica SERVING $UP_S s after start (first start on this machine: cold caches)" | tee -a "$log"
    nvidia-smi --query-gpu=index,memory.used,memory.total --format=csv | tee -a "$log"
    if [ -n "${E2E_4GPU_LEVELS-64,256,512}" ]; then
      python3 benchmarks/bench_e2e.py --compose-ready "$ready" --concurrency "${E2E_4GPU_LEVELS-64,256,512}" \
        --stagger-starts --out "$OUT/$tag.json" 2>&1 | tee -a "$log"
    fi
    for victim in ${E2E_4GPU_KILLS-talker-a-1 vocoder-a-1}; do
      python3 benchmarks/replica_kill.py --compose-ready "$ready" --kill "$victim" --streams "${KILL_STREAMS:-256}" \
        --frames "${KILL_FRAMES:-250}" --kill-after-s "${KILL_AFTER_S:-1}" \
        --rejoin-timeout-s "${KILL_REJOIN_TIMEOUT_S:-240}" --out "$OUT/$tag-kill-$victim.json" 2>&1 | tee -a "$log"
    done
    kill -TERM "$COMPOSE_PID" 2>/dev/null; wait "$COMPOSE_PID"
    if compose_up "$file" "$work/warm" "$ready" "$work/stack.log"; then
      echo "$tag: every replica SERVING $UP_S s after a restart (warm caches)" | tee -a "$log"
    fi
  fi
  kill -TERM "$COMPOSE_PID" 2>/dev/null; wait "$COMPOSE_PID"
  tar czf "$OUT/$tag-service-logs.tgz" -C "$work" --exclude volumes . 2>/dev/null
}

for w in $which; do
  case $w in
    kernels)
      # The interpreter tests depend on the triton/numpy pairing (scripts/gpuimage_kernel_tests.sh
      # reproduces this image's on CPU): the versions head the log.
      install_wheels
      python3 -c 'import importlib.util as u, sys, numpy, pytest, torch, triton; print("python", sys.version.split()[0],
        "torch", torch.__version__, "triton", triton.__version__, "numpy", numpy.__version__, "pytest",
        pytest.__version__, "pytest-timeout", u.find_spec("pytest_timeout") is not None)' 2>&1 | tee "$OUT/kernels.log"
      python3 -m pytest -q -p no:cacheprovider tests/test_snakebeta.py tests/test_rmsnorm.py tests/test_add_rmsnorm.py \
        tests/test_qk_norm_rope.py tests/test_qk_norm_rope_write_kv.py tests/test_qk_norm_rope_write_kv_routing.py tests/test_silu_mul.py tests/test_silu_mul_routing.py tests/test_gumbel_pick.py tests/test_warp_pick.py \
        tests/test_sample_rows.py tests/test_noise_keys.py tests/test_slot_attention.py tests/test_talker_launches.py tests/test_small_m_linear.py tests/test_small_m_linear_routing.py tests/test_pdl.py tests/test_deferred_norm.py tests/test_gemm_tuning.py \
        2>&1 | tee -a "$OUT/kernels.log" ;;
    snake)   python3 benchmarks/bench_snakebeta.py --out "$OUT/snakebeta.json" 2>&1 | tee "$OUT/snakebeta.log" ;;
    decoder) python3 benchmarks/bench_decoder.py --out "$OUT/decoder.json" 2>&1 | tee "$OUT/decoder.log" ;;
    talker)  python3 benchmarks/bench_talker.py --out "$OUT/talker.json" 2>&1 | tee "$OUT/talker.log" ;;
    vocoder-service)
      # VOCODER_CUDNN_MIN_ROW_FRAMES: one run per value (0: heuristic conv picks; n: graphs of at
      # least n rows x frames get cuDNN-timed picks), each into its own file
      for cudnn in ${VOCODER_CUDNN_MIN_ROW_FRAMES:-0}; do
        suffix=$([ "${VOCODER_CUDNN_MIN_ROW_FRAMES:-0}" = 0 ] && echo "" || echo "-cudnn$cudnn")
        python3 benchmarks/bench_vocoder_service.py --modes "${VOCODER_MODES:-eager,graphs,graphs+compile}" \
          --streams "${VOCODER_STREAMS:-1,4,16,64,128}" --rates-fps "${VOCODER_RATES:-25,0}" --audio-s "${VOCODER_AUDIO_S:-10}" \
          --cudnn-benchmark-min-row-frames "$cudnn" \
          --compile-max-row-frames "${VOCODER_COMPILE_MAX_ROW_FRAMES:-0}" \
          --compile-dynamic-frames "${VOCODER_COMPILE_DYNAMIC_FRAMES:-}" \
          --out "$OUT/vocoder-service$suffix.json" 2>&1 | tee "$OUT/vocoder-service$suffix.log"
      done ;;
    conv-layouts)   # whether time-major activations can drop cuDNN's layout transposes (issue #12)
      python3 benchmarks/bench_conv_layouts.py --out "$OUT/conv-layouts.json" 2>&1 | tee "$OUT/conv-layouts.log" ;;
    vocoder-layouts)   # the decoder in both activation layouts (vocoder_service/codec/layout.py, issue #12):
      # an eager 64x25 step's kernels (heuristic conv picks), then the service path at 64 streams
      for layout in ${VOCODER_LAYOUTS:-channel-major time-major}; do
        QWEN3_TTS_VOCODER_LAYOUT=$layout python3 benchmarks/profile_decoder.py --batch 64 --frames 25 \
          --cudnn-benchmark 0 --out "$OUT/decoder-profile-$layout.txt" >> "$OUT/vocoder-layouts.log" 2>&1 \
          || tail -20 "$OUT/vocoder-layouts.log"
        QWEN3_TTS_VOCODER_LAYOUT=$layout python3 benchmarks/bench_vocoder_service.py --modes graphs \
          --streams "${VOCODER_STREAMS:-64}" --rates-fps 0 --out "$OUT/vocoder-service-$layout.json" 2>&1 \
          | tee -a "$OUT/vocoder-layouts.log" | grep -E "audio|first|capture" | tail -8
      done ;;
    vocoder-dtype)   # JSON and log under $OUT after every dtype, the table and the pick by the rule last
      python3 benchmarks/bench_vocoder_dtype.py --dtypes "${VOCODER_DTYPES:-bfloat16,float16,float32}" \
        --out "$OUT/vocoder-dtype.json" > "$OUT/vocoder-dtype-stdout.txt" 2>&1 || tail -30 "$OUT/vocoder-dtype-stdout.txt"
      cat "$OUT/vocoder-dtype.log" ;;
    vocoder-startup)   # seconds from `python -m vocoder_service` (stack defaults) to graphs ready, issue #12:
      # first with empty Triton and Inductor caches (a fresh machine), then again with what the first
      # run left; VOCODER_STARTUP_COMPILE sets --compile-max-row-frames (default -1, auto: none)
      install_wheels; random_checkpoint
      export TRITON_CACHE_DIR=/tmp/triton-startup-cache TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-startup-cache
      rm -rf "$TRITON_CACHE_DIR" "$TORCHINDUCTOR_CACHE_DIR"
      for run in cold-caches warm-caches; do
        ready=/tmp/vocoder-startup.ready.json; rm -f "$ready"
        started=$(python3 -c 'import time; print(time.time())')
        QWEN3_TTS_VOCODER_COMPILE_MAX_ROW_FRAMES=${VOCODER_STARTUP_COMPILE:--1} python3 -m vocoder_service --ready-file "$ready" --model "$CKPT" --device cuda --bind 'tcp://127.0.0.1:*' \
          --grpc-port 0 --gpu-memory-fraction "${VOCODER_MEMORY_FRACTION:-0.3}" > "$OUT/vocoder-startup-$run.log" 2>&1 &
        pid=$!
        if wait_ready "$ready" "$pid" 400; then
          python3 -c "import time; print('$run: graphs ready after %.1f s' % (time.time() - $started))"
        else
          echo "$run: not ready within 400 s (see vocoder-startup-$run.log)"
        fi | tee -a "$OUT/vocoder-startup.txt"
        kill -TERM "$pid" 2>/dev/null; wait "$pid"
      done ;;
    decoder-profile)   # where one eager batch x frames step spends GPU time, by kernel and by ATen op
      for shape in ${PROFILE_SHAPES:-64x25}; do
        python3 benchmarks/profile_decoder.py --batch "${shape%x*}" --frames "${shape#*x}" --cudnn-benchmark 0 \
          --out "$OUT/decoder-profile-$shape.txt" --by-op "$OUT/decoder-profile-$shape-ops.txt" \
          > "$OUT/decoder-profile-$shape.log" 2>&1 || tail -20 "$OUT/decoder-profile-$shape.log"
      done ;;
    talker-service)
      python3 benchmarks/bench_talker.py --path both --context-lens 256,1024 --out "$OUT/talker-service.json" 2>&1 \
        | tee "$OUT/talker-service.log" ;;
    talker-ab) talker_ab ;;
    pdl-ab)
      python3 benchmarks/bench_pdl.py --out "$OUT/pdl.json" > "$OUT/pdl-ab.log" 2>&1 || tail -5 "$OUT/pdl-ab.log"
      env_ab QWEN3_TTS_PDL pdl ;;
    cublaslt-algos)
      python3 benchmarks/probe_cublaslt_algos.py --batches "${CUBLASLT_BATCHES:-256,128,64}" \
        --out "$OUT/cublaslt-algos.json" 2>&1 | tee "$OUT/cublaslt-algos.log" ;;
    silu-mul-norm)
      python3 benchmarks/bench_silu_mul_norm.py --out "$OUT/silu-mul-norm.json" 2>&1 | tee "$OUT/silu-mul-norm.log" ;;
    deferred-norm-ab) env_ab QWEN3_TTS_DEFERRED_NORM deferred-norm ;;
    fused-attention-ab) env_ab QWEN3_TTS_FUSED_ATTENTION fused-attention ;;
    gemm-tuning-ab) env_ab QWEN3_TTS_GEMM_TUNING gemm-tuning ;;
    qkv-tables-ab) env_ab QWEN3_TTS_QKV_TABLES qkv-tables ;;
    talker-profile)
      python3 benchmarks/profile_talker.py --batch-sizes "${PROFILE_BATCHES:-1,64,256}" --out "$OUT/talker-profile.json" \
        --by-op "$OUT/talker-profile-ops.txt" > "$OUT/talker-profile.log" 2>&1 || tail -20 "$OUT/talker-profile.log" ;;
    decode-kernels)
      python3 benchmarks/bench_decode_kernels.py --out "$OUT/decode-kernels.json" 2>&1 | tee "$OUT/decode-kernels.log" ;;
    small-m-linear)
      python3 benchmarks/bench_small_m_linear.py --out "$OUT/small-m-linear.json" 2>&1 | tee "$OUT/small-m-linear.log"
      for on in 0 1; do
        QWEN3_TTS_LINEAR_TRITON=$on python3 benchmarks/profile_talker.py --batch-sizes 1,8 \
          --out "$OUT/talker-profile-linear-triton$on.json" 2>&1 | grep -E "^batch" | tee -a "$OUT/small-m-linear.log"
      done ;;
    e2e)
      install_wheels; random_checkpoint
      python3 benchmarks/bench_e2e.py --model "$CKPT" --device cuda --concurrency "${E2E_LEVELS:-1,4,16,64,128,256}" \
        ${E2E_STAGGER:+--stagger-starts} --out "$OUT/e2e.json" 2>&1 | tee "$OUT/e2e.log" ;;
    e2e-repeats)
      install_wheels; random_checkpoint
      for run in $(seq "${E2E_REPEATS:-2}"); do
        python3 benchmarks/bench_e2e.py --model "$CKPT" --device cuda --concurrency "${REPEAT_LEVELS:-256}" \
          --out "$OUT/e2e-repeat-$run.json" > "$OUT/e2e-repeat-$run.log" 2>&1
        grep -E "^c=|host p50" "$OUT/e2e-repeat-$run.log" | sed "s/^/repeat $run: /"
      done ;;
    e2e-mps) install_wheels; random_checkpoint; e2e_mps ;;
    e2e-ab) install_wheels; random_checkpoint; e2e_ab ;;
    e2e-gapless) install_wheels; random_checkpoint; e2e_gapless ;;
    http-vs-grpc) install_wheels; random_checkpoint
      python3 benchmarks/bench_http_vs_grpc.py --model "$CKPT" --device cuda --concurrency "${HTTP_LEVELS:-1,64}" \
        --rounds "${HTTP_ROUNDS:-2}" --out "$OUT/http-vs-grpc.json" 2>&1 | tee "$OUT/http-vs-grpc.log" ;;
    e2e-clone) install_wheels; e2e_clone ;;
    e2e-design)   # the VoiceDesign workload (a voice described in words) on its own random checkpoint
      install_wheels
      [ -f "$DESIGN_CKPT/config.json" ] || python3 -m checkpoint.tiny --type voice_design --size 1b7 --out "$DESIGN_CKPT"
      python3 benchmarks/bench_e2e.py --model "$DESIGN_CKPT" --device cuda --workload voice-design \
        --concurrency "${DESIGN_LEVELS:-1,4,8,16,32,64}" --out "$OUT/e2e-design.json" 2>&1 | tee "$OUT/e2e-design.log" ;;
    e2e-2gpu) install_wheels; random_checkpoint; e2e_two_gpus ;;
    e2e-4gpu) install_wheels; random_checkpoint; e2e_four_gpus deploy/compose/four-gpu.yml e2e-4gpu ;;
    e2e-4gpu-shared) install_wheels; random_checkpoint; e2e_four_gpus deploy/compose/four-gpu-shared.yml e2e-4gpu-shared ;;
    e2e-registered-vs-speaker) install_wheels; e2e_registered_vs_speaker ;;
    *) echo "unknown benchmark $w" ;;
  esac
done
