"""resolve_model_dir: local dirs, embedded tiny names (cached, race-safe), hub ids with clear errors."""
from __future__ import annotations

import threading

import pytest

from checkpoint import files
from checkpoint.errors import CheckpointError
from checkpoint.files import resolve_model_dir


def test_local_directory_is_returned_resolved(tmp_path):
    (tmp_path / "m").mkdir()
    assert resolve_model_dir(str(tmp_path / "m" / ".." / "m")) == (tmp_path / "m").resolve()


def test_a_file_or_unknown_name_is_refused(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(CheckpointError, match="is a file"):
        resolve_model_dir(tmp_path / "f")
    with pytest.raises(CheckpointError, match=r"'\./no/such/dir' not found.*tiny-base"):
        resolve_model_dir("./no/such/dir")
    with pytest.raises(CheckpointError, match="not found"):
        resolve_model_dir("tiny-large")


def test_tiny_names_generate_once_into_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(files.CACHE_ENV, str(tmp_path / "env-cache"))
    first = resolve_model_dir("tiny-base")
    assert first.parent == tmp_path / "env-cache" / "tiny"
    assert (first / "model.safetensors").is_file() and (first / "speech_tokenizer/config.json").is_file()
    stamp = (first / "model.safetensors").stat().st_mtime_ns
    assert resolve_model_dir("tiny-base") == first
    assert (first / "model.safetensors").stat().st_mtime_ns == stamp  # served from the cache
    # "tiny" is the CustomVoice model; an explicit cache_dir beats the environment
    assert resolve_model_dir("tiny", tmp_path / "c") == resolve_model_dir("tiny-custom-voice", tmp_path / "c")
    assert '"custom_voice"' in (resolve_model_dir("tiny", tmp_path / "c") / "config.json").read_text()


def test_concurrent_first_use_is_safe(tmp_path):
    results, errors = [], []

    def resolve():
        try:
            results.append(resolve_model_dir("tiny-voice-design", tmp_path))
        except Exception as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=resolve) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors and len(results) == 3 and len(set(results)) == 1
    # every loser cleaned up its temporary directory; one complete checkpoint remains
    assert [p.name for p in (tmp_path / "tiny").iterdir()] == [results[0].name]
    assert (results[0] / "speech_tokenizer/model.safetensors").is_file()


def test_cache_key_follows_generator_sources():
    assert files.tiny_source_hash() == files.tiny_source_hash()
    assert len(files.tiny_source_hash()) == 12


def test_unreachable_hub_is_a_clear_error(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # nothing listens on port 9
    with pytest.raises(CheckpointError, match=r"could not fetch model 'Qwen/Qwen3-TTS-12Hz-1.7B-Base'.*local"):
        resolve_model_dir("Qwen/Qwen3-TTS-12Hz-1.7B-Base", cache_dir=tmp_path / "hf")


def test_offline_hub_without_cache_is_a_clear_error(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(CheckpointError, match="could not fetch model 'Qwen/Qwen3-TTS-12Hz-0.6B-Base'"):
        resolve_model_dir("Qwen/Qwen3-TTS-12Hz-0.6B-Base", cache_dir=tmp_path / "hf")
