"""VoiceClonePrompt: validation, save/load round trip, and refusal of incompatible files."""
from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from talker_service.voice import clone_prompt as cp
from talker_service.voice.clone_prompt import VoiceClonePrompt

ROOT = Path(__file__).resolve().parents[1]


def _icl_prompt(hidden: int = 48, num_frames: int = 7) -> VoiceClonePrompt:
    gen = torch.Generator().manual_seed(3)
    return VoiceClonePrompt(
        x_vector=torch.randn(hidden, generator=gen),
        ref_codes=torch.randint(0, 2048, (num_frames, 16), generator=gen),
        ref_text_ids=[388, 288, 426, 11],
        tts_model_size="1b7",
        ref_text="Hello there,",
    )


def test_icl_round_trip_is_exact(tmp_path):
    prompt = _icl_prompt()
    path = tmp_path / "voices" / "alice.safetensors"
    prompt.save(path)
    loaded = VoiceClonePrompt.load(path, hidden_size=48)
    assert loaded.icl_mode
    assert torch.equal(loaded.x_vector, prompt.x_vector) and loaded.x_vector.dtype == torch.float32
    assert torch.equal(loaded.ref_codes, prompt.ref_codes) and loaded.ref_codes.dtype == torch.int64
    assert loaded.ref_text_ids == [388, 288, 426, 11]
    assert (loaded.tts_model_type, loaded.tts_model_size, loaded.ref_text) == ("base", "1b7", "Hello there,")
    assert not list(path.parent.glob("*.tmp")), "atomic save left a temp file behind"


def test_x_vector_only_round_trip_via_bytes():
    prompt = VoiceClonePrompt(x_vector=torch.linspace(-1, 1, 32, dtype=torch.bfloat16), ref_codes=None, ref_text_ids=None)
    assert not prompt.icl_mode and prompt.x_vector.dtype == torch.float32
    loaded = VoiceClonePrompt.from_bytes(prompt.to_bytes())
    assert not loaded.icl_mode and loaded.ref_codes is None and loaded.ref_text_ids is None
    assert torch.equal(loaded.x_vector, prompt.x_vector)


def test_file_has_version_and_model_info_in_json_header(tmp_path):
    path = tmp_path / "v.safetensors"
    _icl_prompt().save(path)
    data = path.read_bytes()
    (header_len,) = struct.unpack("<Q", data[:8])
    info = json.loads(json.loads(data[8:8 + header_len])["__metadata__"]["voice_prompt"])
    assert info["format_version"] == cp.FORMAT_VERSION
    assert info["hidden_size"] == 48 and info["tts_model_size"] == "1b7" and info["icl_mode"] is True
    assert info["num_ref_frames"] == 7


def test_load_into_other_hidden_size_is_refused(tmp_path):
    path = tmp_path / "v.safetensors"
    _icl_prompt(hidden=2048).save(path)
    with pytest.raises(ValueError, match=r"hidden size 2048 .*1b7.* this model has hidden size 1024"):
        VoiceClonePrompt.load(path, hidden_size=1024)
    with pytest.raises(ValueError, match="hidden size 2048"):
        VoiceClonePrompt.load(path).check_hidden_size(1024)


def test_refuses_files_that_are_not_voice_prompts(tmp_path):
    plain = tmp_path / "plain.safetensors"
    save_file({"x_vector": torch.zeros(4)}, str(plain))
    with pytest.raises(ValueError, match="not a voice prompt file"):
        VoiceClonePrompt.load(plain)
    with pytest.raises(ValueError, match="not a safetensors file"):
        VoiceClonePrompt.from_bytes(b"\x00\x01")
    with pytest.raises(ValueError, match="not found"):
        VoiceClonePrompt.load(tmp_path / "missing.safetensors")


def test_refuses_other_format_version(tmp_path, monkeypatch):
    data = _icl_prompt().to_bytes()
    monkeypatch.setattr(cp, "FORMAT_VERSION", 99)
    with pytest.raises(ValueError, match="format_version 1; this build reads version 99"):
        VoiceClonePrompt.from_bytes(data)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(x_vector=torch.zeros(2, 3), ref_codes=None, ref_text_ids=None), "1-D tensor"),
        (dict(x_vector=torch.tensor([1.0, float("nan")]), ref_codes=None, ref_text_ids=None), "NaN"),
        (dict(x_vector=torch.zeros(4), ref_codes=torch.zeros(3, 16, dtype=torch.long), ref_text_ids=None), "go together"),
        (dict(x_vector=torch.zeros(4), ref_codes=torch.zeros(3, 8, dtype=torch.long), ref_text_ids=[1]), r"\[K, 16\]"),
        (dict(x_vector=torch.zeros(4), ref_codes=torch.full((3, 16), 2048), ref_text_ids=[1]), "out of range"),
        (dict(x_vector=torch.zeros(4), ref_codes=torch.zeros(3, 16), ref_text_ids=[1]), "integer codes"),
        (dict(x_vector=torch.zeros(4), ref_codes=torch.zeros(3, 16, dtype=torch.long), ref_text_ids=[]), "ref_text_ids is empty"),
    ],
)
def test_invalid_prompts_name_the_problem(kwargs, message):
    with pytest.raises(ValueError, match=message):
        VoiceClonePrompt(**kwargs)


def test_clone_prompt_module_stands_apart_from_the_builder():
    # The prompt format is read by the talker's StartReader and written by the builder; it must
    # load without the builder (and its encoders), and the builder is reached from its own module.
    code = ("import sys; import talker_service.voice.clone_prompt as cp; "
            "assert 'talker_service.voice.builder' not in sys.modules, 'clone_prompt pulled in the builder'; "
            "assert not hasattr(cp, 'build_clone_prompt'), 'clone_prompt serves build_clone_prompt again'")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    from talker_service.voice.builder import build_clone_prompt, VoiceClonePrompt as BuiltType

    assert callable(build_clone_prompt) and BuiltType is VoiceClonePrompt
