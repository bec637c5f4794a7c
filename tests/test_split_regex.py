"""Which split regex a checkpoint gets (Transformers 5's rule under fix_mistral_regex=True), and the
pure helpers that decide where streamed text may be cut."""
from __future__ import annotations

import json

import pytest

from checkpoint.configs import model_config
from gateway.split_regex import MISTRAL_FIX_PATTERN, QWEN2_PATTERN, split_pattern_for
from gateway.stream_cut import added_token_prefix_start, last_starter, proper_prefixes, trailing_run_start


@pytest.mark.parametrize("config, pattern", [
    (None, QWEN2_PATTERN),                                                    # no config.json
    ({"model_type": "qwen3_tts", "transformers_version": "4.57.3"}, QWEN2_PATTERN),  # the official files
    ({"model_type": "qwen3_tts", "transformers_version": "5.2.0"}, QWEN2_PATTERN),
    ({"model_type": "qwen3_tts"}, MISTRAL_FIX_PATTERN),                        # no version
    ({"model_type": "mistral", "transformers_version": "4.57.3"}, MISTRAL_FIX_PATTERN),
    ({"transformers_version": "4.40.0"}, MISTRAL_FIX_PATTERN),                 # no model type
])
def test_pattern_choice(tmp_path, config, pattern):
    if config is not None:
        (tmp_path / "config.json").write_text(json.dumps(config))
    assert split_pattern_for(tmp_path)[0] == pattern


def test_tiny_checkpoints_name_the_official_transformers_version():
    for model_type in ("base", "custom_voice", "voice_design"):
        assert model_config(model_type)["transformers_version"] == "4.57.3"


def test_trailing_runs():
    assert trailing_run_start("") == 0
    assert trailing_run_start("a fee.\n\n  ") == 6      # the whole whitespace run
    assert trailing_run_start("say Hello") == 4          # letters
    assert trailing_run_start("A中B") == 0               # letters of any case and script
    assert trailing_run_start("word e\u0301") == 5       # a mark continues the letter run
    assert trailing_run_start("12") == 1 and trailing_run_start("x...") == 3  # digits, punctuation end a scan


def test_last_starter_skips_trailing_marks():
    assert last_starter("abc") == 2
    assert last_starter("xa\u031b\u0323") == 1
    assert last_starter("\u0301\u0301") == 0


def test_a_half_arrived_added_token_is_held():
    contents = proper_prefixes(("<|im_end|>", "<think>", "</think>"))
    assert "<|im_end|" in contents and "<|im_end|>" not in contents and "" not in contents
    assert added_token_prefix_start("say <|im_e", contents, 10) == 4
    assert added_token_prefix_start("say <|im_end|>", contents, 10) == 14  # complete: nothing held
    assert added_token_prefix_start("x <", contents, 10) == 2
    assert added_token_prefix_start("x </thin", contents, 10) == 2
    assert added_token_prefix_start("x <|imx", contents, 10) == 7
