"""qwen3-tts-decode: codes file -> WAV, offline and streamed, plus its error paths."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from test_decoder_fixtures import load_tiny_code2wav, random_codes, single_thread, tiny_decoder_dir  # noqa: F401 (single_thread: autouse fixture)
from vocoder_service.decode_cli import main, read_codes

pytestmark = pytest.mark.oracle  # the tiny checkpoint dir is written by the official classes

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "codes_demo.json"
PCM16_STEP = 1.0 / 32768


@pytest.fixture(scope="module")
def codes_file(tmp_path_factory):
    codes = random_codes(1, 9, seed=31)[0].T.numpy()  # [T, 16]
    path = tmp_path_factory.mktemp("codes") / "codes.npy"
    np.save(path, codes)
    return path, codes


def test_offline_and_streamed_wavs_match_the_decoder(tmp_path, codes_file):
    path, codes = codes_file
    expected = load_tiny_code2wav().decode(torch.from_numpy(codes.T.copy()).unsqueeze(0))[0].numpy()
    for extra, name in (([], "offline.wav"), (["--stream-chunk-frames", "4"], "streamed.wav")):
        out = tmp_path / name
        assert main(["--model", str(tiny_decoder_dir()), "--codes", str(path), "--out", str(out), *extra]) == 0
        audio, rate = sf.read(str(out), dtype="float32")
        info = sf.info(str(out))
        assert rate == 24000 and info.channels == 1 and info.subtype == "PCM_16"
        assert audio.shape == (9 * 1920,)
        assert np.abs(audio - expected).max() <= 2 * PCM16_STEP


def test_json_and_npy_codes_read_the_same(tmp_path, codes_file):
    path, codes = codes_file
    json_path = tmp_path / "codes.json"
    json_path.write_text(json.dumps(codes.tolist()))
    assert torch.equal(read_codes(json_path), read_codes(path))
    assert read_codes(path).shape == (1, 16, 9)


@pytest.mark.parametrize(
    "content,message",
    [
        ([[1, 2, 3]], r"codes must have shape \[T, 16\], got \[1, 3\]"),
        ([[0.5] * 16], "codes must be integers"),
        ([], r"codes must have shape \[T, 16\]"),
    ],
)
def test_bad_codes_files_are_named(tmp_path, capsys, content, message):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(content))
    with pytest.raises(ValueError, match=message):
        read_codes(path)
    assert main(["--model", str(tiny_decoder_dir()), "--codes", str(path), "--out", str(tmp_path / "x.wav")]) == 2
    assert "error:" in capsys.readouterr().err


def test_out_of_range_codes_in_file_fail_cleanly(tmp_path, capsys):
    path = tmp_path / "big.json"
    path.write_text(json.dumps([[2048] * 16]))
    assert main(["--model", str(tiny_decoder_dir()), "--codes", str(path), "--out", str(tmp_path / "x.wav")]) == 2
    assert "code >= codebook size 2048" in capsys.readouterr().err


def test_demo_example_decodes_with_the_embedded_tiny_model(tmp_path, monkeypatch):
    """The README's main job: `qwen3-tts-decode --model tiny --codes examples/codes_demo.json`."""
    codes = read_codes(EXAMPLE)
    assert codes.shape[2] >= 25 and int(codes.min()) >= 0 and int(codes.max()) < 2048
    monkeypatch.setenv("QWEN3_TTS_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "demo.wav"
    assert main(["--model", "tiny", "--codes", str(EXAMPLE), "--out", str(out)]) == 0
    audio, rate = sf.read(str(out), dtype="float32")
    assert rate == 24000 and audio.shape == (codes.shape[2] * 1920,)
    assert audio.std() > 1e-3
