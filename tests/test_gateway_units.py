"""Gateway pieces without sockets: tokenizer parity and incremental splitting, audio encodings,
no torch in the gateway process."""
from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile

from checkpoint.files import resolve_model_dir
from gateway.audio_encoding import StreamEncoder, pcm16_bytes, streaming_wav_header
from gateway.text_tokenizer import IncrementalTokenizer, TextTokenizer
from protos.tts.v1 import config_pb2 as C

ROOT = Path(__file__).resolve().parents[1]
TEXTS = ["Hello world.", "  leading spaces and trailing  ", "\nnewline first", "Numbers 12345 and 3.14!",
         "中文测试，你好世界。", "don't you'll we've", "Émigré café naïve", "tabs\tand\n\nnewlines\r\n",
         "<|im_start|> inside text", "emoji 😀 ok", "e\u0301 decomposed accents", "a  b   c"]


@pytest.fixture(scope="module")
def tokenizers_pair():
    from checkpoint.text_tokenizer import load_text_tokenizer
    model_dir = resolve_model_dir("tiny")
    return TextTokenizer.from_dir(model_dir), load_text_tokenizer(model_dir)


@pytest.mark.parametrize("text", TEXTS)
def test_ids_match_the_transformers_tokenizer_whole_and_streamed(tokenizers_pair, text):
    from talker_service.prompt.text_ids import tokenize_instruct, tokenize_target
    ours, hf = tokenizers_pair
    want = tokenize_target(hf, text).text_ids
    assert ours.target_ids(text) == want
    assert ours.instruct_ids(text) == tokenize_instruct(hf, text)
    for step in (1, 2, 5):
        inc = IncrementalTokenizer(ours)
        ids = []
        for i in range(0, len(text), step):
            ids += inc.feed(text[i:i + step])
        assert ids + inc.flush() == want, step


def test_a_trailing_partial_word_is_held_back(tokenizers_pair):
    ours, _ = tokenizers_pair
    inc = IncrementalTokenizer(ours)
    first = inc.feed("Hello wor")
    assert first == ours.target_ids("Hello") and inc.pending == " wor"
    assert inc.feed("ld ") == ours.encode(" world")


class _CountingTokenizer:
    """A `tokenizers.Tokenizer` stand-in that counts the calls into the real one."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer, self.calls = tokenizer, []

    def __getattr__(self, name):
        attr = getattr(self.tokenizer, name)
        if callable(attr):
            def counted(*args, **kwargs):
                self.calls.append(name)
                return attr(*args, **kwargs)
            return counted
        return attr


def test_a_streamed_word_costs_one_call_into_the_tokenizer(tokenizers_pair):
    ours, _ = tokenizers_pair
    counting = TextTokenizer(ours.tokenizer)
    counting.tokenizer = _CountingTokenizer(ours.tokenizer)   # each word: one encode, nothing else called on it
    inc, ids = IncrementalTokenizer(counting), []
    words = "The quick brown fox jumps over the lazy dog.".split(" ")
    for word in [w + " " for w in words[:-1]] + [words[-1]]:
        ids += inc.feed(word)
    assert counting.tokenizer.calls == ["encode"] * len(words)
    assert ids + inc.flush() == ours.target_ids(" ".join(words))


def test_pcm16_leaves_out_the_clamp_only_for_samples_known_in_range():
    pcm = np.concatenate([tone(4000), np.float32([0.99999, -0.99999, 0.0])])
    assert pcm16_bytes(pcm, is_in_range=True) == pcm16_bytes(pcm)
    loud = np.float32([1.0, -1.0, 1.5, -3.0])
    assert np.frombuffer(pcm16_bytes(loud), "<i2").tolist() == [32767, -32767, 32767, -32767]


def tone(n: int = 24000) -> np.ndarray:
    return (0.4 * np.sin(np.arange(n) * 2 * np.pi * 440 / 24000)).astype(np.float32)


def encode_in_chunks(encoding: int, rate: int, pcm: np.ndarray, speed: float = 1.0):
    enc = StreamEncoder(encoding, 24000, rate, speed)
    parts = [enc.encode(pcm[i:i + 3840], is_last=i + 3840 >= pcm.size) for i in range(0, pcm.size, 3840)]
    return b"".join(p.audio for p in parts), sum(p.num_samples for p in parts)


def test_pcm16_float32_and_mulaw_round_trip():
    pcm = tone()
    data, n = encode_in_chunks(C.AUDIO_ENCODING_FLOAT32, 24000, pcm)
    np.testing.assert_array_equal(np.frombuffer(data, "<f4"), pcm)
    data, n = encode_in_chunks(C.AUDIO_ENCODING_PCM16, 24000, pcm)
    np.testing.assert_allclose(np.frombuffer(data, "<i2") / 32767, pcm, atol=1e-4)
    data, n = encode_in_chunks(C.AUDIO_ENCODING_MULAW, 8000, pcm)
    assert len(data) == n == 8000  # one byte per sample at 8 kHz
    back, _ = soundfile.read(io.BytesIO(data), format="RAW", subtype="ULAW", samplerate=8000, channels=1)
    want = np.sin(np.arange(8000) * 2 * np.pi * 440 / 8000) * 0.4
    assert np.abs(back[100:-100] - want[100:-100]).max() < 0.05  # mu-law + resampling error


def test_streamed_wav_has_an_unknown_length_header_and_opus_is_one_valid_file():
    pcm = tone(48000)
    data, n = encode_in_chunks(C.AUDIO_ENCODING_WAV, 16000, pcm)
    assert data[:44] == streaming_wav_header(16000) and n == 32000 and len(data) == 44 + 2 * n
    data, n = encode_in_chunks(C.AUDIO_ENCODING_OGG_OPUS, 48000, pcm)
    back, rate = soundfile.read(io.BytesIO(data))
    assert rate == 48000 and n == 96000 and abs(len(back) - 96000) < 1000


def test_speed_changes_duration_and_one_leaves_audio_untouched():
    pcm = tone(48000)
    fast, n_fast = encode_in_chunks(C.AUDIO_ENCODING_FLOAT32, 24000, pcm, speed=2.0)
    assert abs(n_fast - 24000) < 3000
    same, _ = encode_in_chunks(C.AUDIO_ENCODING_FLOAT32, 24000, pcm, speed=1.0)
    np.testing.assert_array_equal(np.frombuffer(same, "<f4"), pcm)


def test_gateway_process_imports_no_torch():
    code = ("import sys, gateway.main, gateway.server, gateway.servicer, client, client.cli; "
            "assert 'torch' not in sys.modules and 'transformers' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=60)


def test_only_speaker_and_design_configs_resolve_in_the_loop():
    from gateway.resolve import Resolver
    from protos.tts.v1 import config_pb2 as C

    assert Resolver.is_quick(C.SynthesisConfig(speaker=C.SpeakerVoice(name="vivian")))
    assert Resolver.is_quick(C.SynthesisConfig(design=C.DesignVoice(instruct="a calm voice")))
    # a clone decodes audio and a registered voice reads files: those go to a thread
    assert not Resolver.is_quick(C.SynthesisConfig(clone=C.CloneVoice(reference_text="hello")))
    assert not Resolver.is_quick(C.SynthesisConfig(registered_voice_id="v1"))
    assert not Resolver.is_quick(C.SynthesisConfig())
