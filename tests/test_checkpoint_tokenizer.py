"""The tiny text tokenizer: Qwen2 layout, official ids where prompts depend on them, round trips."""
from __future__ import annotations

import json

import pytest

from checkpoint.bpe_learn import apply_merges, byte_alphabet, learn_merges, pin_word, split_words
from checkpoint.errors import CheckpointError
from checkpoint.text_tokenizer import ADDED_TOKENS, build_tiny_bpe, load_text_tokenizer, write_text_tokenizer
from oracle import import_oracle

PROMPT = "<|im_start|>assistant\nHello world<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("tok")
    write_text_tokenizer(directory)
    return directory


@pytest.fixture(scope="module")
def tok(tok_dir):
    return load_text_tokenizer(tok_dir)


def test_files_are_the_qwen2_layout(tok_dir):
    assert sorted(p.name for p in tok_dir.iterdir()) == ["merges.txt", "tokenizer_config.json", "vocab.json"]
    vocab = json.loads((tok_dir / "vocab.json").read_text(encoding="utf-8"))
    assert sorted(vocab.values()) == list(range(151643))  # dense like the official vocabulary
    config = json.loads((tok_dir / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "Qwen2Tokenizer"
    decoder = config["added_tokens_decoder"]
    assert decoder["151644"]["content"] == "<|im_start|>" and decoder["151671"]["content"] == "<tts_pad>"
    assert (tok_dir / "merges.txt").read_text(encoding="utf-8").startswith("#version: 0.2\n")


def test_prompt_template_ids_match_official(tok):
    ids = tok(PROMPT)["input_ids"]
    assert ids[:3] == [151644, 77091, 198]
    assert ids[-5:] == [151645, 198, 151644, 77091, 198]
    assert 1 <= len(ids) - 8 <= 11  # "Hello world" is learnt pieces, not 11 single bytes
    assert tok("<|im_start|>user\n")["input_ids"] == [151644, 872, 198]
    assert tok.decode(ids) == PROMPT


def test_special_and_byte_ids(tok):
    expected = {
        "<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645, "<|audio_start|>": 151669,
        "<|audio_end|>": 151670, "<tts_pad>": 151671, "<tts_text_bos>": 151672, "<tts_text_eod>": 151673,
        "<tts_text_bos_single>": 151674, "<|audio_pad|>": 151675,
    }
    assert {t: tok.convert_tokens_to_ids(t) for t in expected} == expected
    assert len(tok) == 151676 and len(ADDED_TOKENS) == 33
    assert tok.convert_ids_to_tokens([0, 198, 220, 255]) == ["!", "Ċ", "Ġ", "Ń"]  # GPT-2 byte order (byte 173 last)
    assert tok.decode([0]) == "!" and tok.decode([198]) == "\n"
    assert tok("<tts_text_bos>x<tts_text_eod>")["input_ids"][0::2] == [151672, 151673]
    assert tok.decode([151644, 872], skip_special_tokens=True) == "user"


@pytest.mark.parametrize(
    "text",
    ["Hello, world! It's 12:45.", "你好，世界！今天天气很好。", "こんにちは、世界。", "안녕하세요",
     "Привет, мир!", "Ça va? ¡Sí! Olá, tudo bem.", "  spaces\tand\n\nnewlines  ", "emoji 😀 ok", "🎉"],
)
def test_round_trip(tok, text):
    ids = tok(text)["input_ids"]
    assert all(0 <= i < 151643 for i in ids)
    assert tok.decode(ids) == text


def test_official_processor_accepts_the_tiny_checkpoint(tmp_path):
    import_oracle()
    from qwen_tts.core.models.processing_qwen3_tts import Qwen3TTSProcessor
    from checkpoint.files import resolve_model_dir

    root = resolve_model_dir("tiny", cache_dir=tmp_path)
    processor = Qwen3TTSProcessor.from_pretrained(str(root))
    assert processor(text=PROMPT)["input_ids"][0][:3] == [151644, 77091, 198]


def test_learning_is_deterministic_and_pins_words():
    assert build_tiny_bpe() == build_tiny_bpe()
    merges = learn_merges("low lower lowest low low", 10)
    assert merges[0] == ("l", "o")  # the most frequent pair comes first
    word = split_words("assistant")[0]
    assert len(apply_merges(word, merges)) > 1
    assert apply_merges(word, pin_word(merges, word)) == [word]
    assert byte_alphabet()[198] == "Ċ" and len(set(byte_alphabet())) == 256


def test_missing_tokenizer_file_is_named(tok_dir, tmp_path):
    for name in ("vocab.json", "tokenizer_config.json"):
        (tmp_path / name).write_bytes((tok_dir / name).read_bytes())
    with pytest.raises(CheckpointError, match=r"missing file: .*merges\.txt"):
        load_text_tokenizer(tmp_path)
