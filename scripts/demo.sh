#!/usr/bin/env bash
# The main job on a fresh machine: install, start the whole stack (vocoder + talker + gateway) with the
# embedded tiny model on CPU, synthesize one sentence through the public gRPC API into hello.wav, stop.
# Pass a real model with MODEL=<dir|hub id> DEVICE=cuda.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
$PY -m pip install -q torch==2.13.0
$PY -m pip install -q -e .
WORK=$(mktemp -d)
$PY -m launcher --model "${MODEL:-tiny}" --device "${DEVICE:-cpu}" --grpc-port 0 --http-port 0 --metrics-port -1 \
    --work-dir "$WORK" --ready-file "$WORK/stack.json" &
STACK=$!
trap 'kill -TERM $STACK 2>/dev/null; wait $STACK 2>/dev/null || true' EXIT
for _ in $(seq 1 240); do [ -s "$WORK/stack.json" ] && break; kill -0 $STACK || exit 1; sleep 0.5; done
[ -s "$WORK/stack.json" ] || { echo "stack did not become ready; logs in $WORK" >&2; exit 1; }
TARGET=$($PY -c "import json,sys; print(json.load(open(sys.argv[1]))['grpc_target'])" "$WORK/stack.json")
$PY -m client "${TEXT:-Hello from Qwen3 TTS.}" --target "$TARGET" -o "${OUT_WAV:-hello.wav}"
