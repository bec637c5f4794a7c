#!/bin/sh
# Container entry point: the first argument picks the role, the rest are that role's flags.
#   qwen3-tts gateway|talker|vocoder [--flag value ...]
#   qwen3-tts healthcheck HOST:PORT [--service NAME]   (compose health checks)
# Every role also reads its QWEN3_TTS_<ROLE>_* environment (the Helm ConfigMap sets those).
# `exec` so the Python process is PID 1's only child chain and receives SIGTERM directly: the
# services drain in-flight streams on SIGTERM, which a wrapping shell would swallow.
set -eu
PYTHON="${PYTHON:-python}"
role="${1:-}"
case "$role" in
  gateway) module=gateway ;;
  talker) module=talker_service ;;
  vocoder) module=vocoder_service ;;
  healthcheck) module=healthcheck ;;
  *)
    echo "usage: qwen3-tts gateway|talker|vocoder|healthcheck [args...] (got '${role}')" >&2
    exit 64
    ;;
esac
shift
# Triton keeps compiled kernels in TRITON_CACHE_DIR (the image: /cache/triton, on the volume, so a
# restart skips compiling). A read-only volume (a pre-seeded model claim) would make every kernel
# build fail and fall back to slow paths: send the cache to the container's temp dir instead.
if [ -n "${TRITON_CACHE_DIR:-}" ] && [ "$module" != healthcheck ]; then
  if ! { mkdir -p "$TRITON_CACHE_DIR" 2>/dev/null && [ -w "$TRITON_CACHE_DIR" ]; }; then
    echo "qwen3-tts: $TRITON_CACHE_DIR cannot be written; Triton's kernel cache goes to /tmp/triton" >&2
    export TRITON_CACHE_DIR=/tmp/triton
  fi
fi
if [ "$module" = healthcheck ]; then
  exec "$PYTHON" "${QWEN3_TTS_HEALTHCHECK:-/opt/qwen3-tts/healthcheck.py}" "$@"
fi
exec "$PYTHON" -m "$module" "$@"
