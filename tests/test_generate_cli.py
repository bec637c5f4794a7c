"""The generate CLI end to end on the embedded tiny checkpoints (generated into a temp cache)."""
from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

from talker_service.generate_cli import main
from test_prompt_oracle import one_torch_thread  # noqa: F401  (autouse: one intra-op thread)


@pytest.fixture(autouse=True)
def tiny_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("QWEN3_TTS_CACHE", str(tmp_path_factory.getbasetemp() / "tiny-cache"))


def run(tmp_path, name, *args):
    out = tmp_path / f"{name}.wav"
    codes = tmp_path / f"{name}.npy"
    status = main(["--device", "cpu", "--out", str(out), "--codes-out", str(codes), "--max-new-tokens", "8", *args])
    return status, out, codes


def test_custom_voice_to_wav_is_seed_deterministic(tmp_path):
    args = ["--model", "tiny-custom-voice", "--text", "Hello there.", "--speaker", "vivian", "--language", "english",
            "--seed", "7", "--streaming-text"]
    status, wav, codes = run(tmp_path, "a", *args)
    assert status == 0
    pcm, rate = sf.read(wav, dtype="float32")
    frames = np.load(codes)
    assert rate == 24000 and frames.shape[1] == 16 and 2 <= frames.shape[0] <= 7
    assert pcm.shape == (frames.shape[0] * 1920,)
    assert run(tmp_path, "b", *args)[0] == 0
    assert np.array_equal(np.load(tmp_path / "b.npy"), frames)


def test_base_clone_saves_a_reusable_voice(tmp_path):
    rng = np.random.default_rng(1)
    ref = tmp_path / "ref.wav"
    sf.write(ref, (0.2 * rng.standard_normal(2 * 16000)).astype(np.float32), 16000)   # resampled to 24 kHz
    voice = tmp_path / "voice.safetensors"
    common = ["--model", "tiny-base", "--text", "Clone me.", "--language", "english", "--greedy"]
    status, _, codes = run(tmp_path, "clone", *common, "--ref-audio", str(ref), "--ref-text", "Some words.",
                           "--save-voice", str(voice))
    assert status == 0 and voice.is_file()
    status, _, reused = run(tmp_path, "reuse", *common, "--voice-prompt", str(voice))
    assert status == 0
    assert np.array_equal(np.load(codes), np.load(reused))


def test_bad_input_exits_2_with_the_reason(tmp_path, capsys):
    status, wav, _ = run(tmp_path, "bad", "--model", "tiny-custom-voice", "--text", "Hi.", "--speaker", "nobody")
    assert status == 2 and not wav.exists()
    assert "unknown speaker 'nobody'; valid: aiden" in capsys.readouterr().err
