"""Streamed text tokenizes exactly as the whole text, on the real Qwen vocabulary, under both split
regexes the official loader can pick; whole-text ids equal the official processor's."""
from __future__ import annotations

import itertools
import json
import random

import pytest

from gateway.split_regex import MISTRAL_FIX_PATTERN, QWEN2_PATTERN, split_pattern_for
from gateway.text_tokenizer import IncrementalTokenizer, TextTokenizer
from oracle import import_oracle
from real_vocab import real_tokenizer_json, write_real_vocab_checkpoint
from text_corpus import CORPUS

# Saved-with versions: the official checkpoints' (Qwen2 regex) and none (Transformers 5's
# case-splitting substitute under fix_mistral_regex=True).
VARIANTS = {"official-4.57.3": "4.57.3", "no-version": None}
# Classes the split regexes scan differently: lower/upper letters, CJK (Lo: both cases at once),
# a combining mark, a digit, whitespace kinds, contraction pieces, punctuation, "/", an emoji.
ALPHABET = ["a", "B", "中", "\u0301", "1", " ", "\n", "\t", "'", "s", "l", ".", "/", "😀"]


@pytest.fixture(scope="module", params=list(VARIANTS), ids=list(VARIANTS))
def real_dir(request, tmp_path_factory):
    return write_real_vocab_checkpoint(tmp_path_factory.mktemp(request.param), VARIANTS[request.param])


@pytest.fixture(scope="module")
def ours(real_dir):
    return TextTokenizer.from_dir(real_dir)


@pytest.fixture(scope="module")
def official(real_dir):
    """The text tokenizer as qwen_tts loads it (AutoProcessor, fix_mistral_regex=True)."""
    import_oracle()
    from qwen_tts.core.models import Qwen3TTSConfig, Qwen3TTSProcessor
    from transformers import AutoConfig, AutoProcessor

    AutoConfig.register("qwen3_tts", Qwen3TTSConfig, exist_ok=True)
    AutoProcessor.register(Qwen3TTSConfig, Qwen3TTSProcessor, exist_ok=True)
    return AutoProcessor.from_pretrained(str(real_dir), fix_mistral_regex=True)


def streamed(ours: TextTokenizer, deltas) -> list[int]:
    inc = IncrementalTokenizer(ours)
    ids = []
    for delta in deltas:
        ids += inc.feed(delta)
    return ids + inc.flush()


def mismatched_cuts(ours: TextTokenizer, text: str) -> list[int]:
    want = ours.target_ids(text)
    return [cut for cut in range(len(text) + 1) if streamed(ours, [text[:cut], text[cut:]]) != want]


def test_the_regex_follows_the_checkpoint_config(real_dir, ours):
    saved_with = json.loads((real_dir / "config.json").read_text()).get("transformers_version")
    pattern, _ = split_pattern_for(real_dir)
    pieces = [ours.tokenizer.id_to_token(i) for i in ours.encode("iPhone McDonald's")]
    if saved_with == "4.57.3":
        assert pattern == QWEN2_PATTERN and pieces == ["iPhone", "ĠMcDonald", "'s"]
    else:
        assert pattern == MISTRAL_FIX_PATTERN and pieces == ["i", "Phone", "ĠMc", "Donald", "'s"]


def test_whole_text_ids_match_the_official_processor(ours, official):
    for text in CORPUS:
        wrapped = official(text=f"<|im_start|>assistant\n{text}<|im_end|>\n<|im_start|>assistant\n")["input_ids"][0]
        assert ours.target_ids(text) == list(wrapped[3:-5]), text
        instruct = official(text=f"<|im_start|>user\n{text}<|im_end|>\n")["input_ids"][0]
        assert ours.instruct_ids(text) == list(instruct), text


def test_ids_match_qwens_own_tokenizer_json(tmp_path_factory):
    """The vocabulary's own tokenizer.json (Qwen2 regex) agrees with ours on the official config."""
    from tokenizers import AddedToken, Tokenizer
    real_dir = write_real_vocab_checkpoint(tmp_path_factory.mktemp("tokjson"), "4.57.3")
    ours = TextTokenizer.from_dir(real_dir)
    reference = Tokenizer.from_file(str(real_tokenizer_json()))
    # Qwen3-TTS adds audio/TTS tokens after Qwen3's (151669-151675); the LLM's file lacks them.
    for token_id, spec in sorted(json.loads((real_dir / "tokenizer_config.json").read_text())["added_tokens_decoder"].items()):
        if reference.token_to_id(spec["content"]) is None:
            reference.add_special_tokens([AddedToken(spec["content"], normalized=False, special=True)])
            assert reference.token_to_id(spec["content"]) == int(token_id)
    for text in CORPUS:
        assert ours.encode(text) == reference.encode(text, add_special_tokens=False).ids, text


def test_the_issue_case_streams_as_the_whole_text(ours):
    text = "a fee.\n\n  5. Convey"
    whole = [ours.tokenizer.id_to_token(i) for i in ours.target_ids(text)]
    assert whole[2:6] == [".ĊĊ", "Ġ", "Ġ", "5"]
    cut = text.index("5") + 1
    assert streamed(ours, [text[:cut], text[cut:]]) == ours.target_ids(text)


def test_every_single_cut_of_every_text(ours):
    failures = {text: cuts for text in CORPUS if (cuts := mismatched_cuts(ours, text))}
    assert not failures, list(failures.items())[:3]


def test_random_multi_cut_feeds_and_one_character_at_a_time(ours):
    rng = random.Random(39)
    for text in CORPUS:
        want = ours.target_ids(text)
        assert streamed(ours, list(text)) == want, text
        for _ in range(12):
            cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, rng.randint(2, 12)))) if len(text) > 1 else []
            deltas = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)])]
            assert streamed(ours, deltas) == want, deltas


def test_added_tokens_split_across_deltas(ours):
    text = "say <|im_end|> now <tts_pad><think>x</think>"
    want = ours.target_ids(text)
    assert 151645 in want and 151671 in want and 151667 in want
    assert streamed(ours, ["say <", "|im_", "end|", "> now <", "tts_pad><", "think>x</th", "ink>"]) == want
    assert streamed(ours, ["say <|im_end", "|> now"]) == ours.target_ids("say <|im_end|> now")
    # A near miss stays text.
    assert streamed(ours, ["<|im_e", "nd| >"]) == ours.target_ids("<|im_end| >")


def test_every_cut_of_short_strings_over_the_tricky_classes(ours):
    strings = ["".join(chars) for n in (1, 2, 3) for chars in itertools.product(ALPHABET, repeat=n)]
    rng = random.Random(7)
    strings += ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(4, 9))) for _ in range(600)]
    failures = {s: cuts for s in strings if (cuts := mismatched_cuts(ours, s))}
    assert not failures, list(failures.items())[:5]
