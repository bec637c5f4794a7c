"""resolve_model_dir: local dirs, embedded tiny names (cached, race-safe), hub ids with clear errors."""
from __future__ import annotations

import threading
from pathlib import Path

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


def test_cache_key_follows_generator_sources(tmp_path, monkeypatch):
    key = files.tiny_source_hash()
    assert len(key) == 12 and files.tiny_source_hash() == key          # stable while nothing changes
    cached = tmp_path / "tiny" / f"tiny-base-seed0-{key}"
    cached.mkdir(parents=True)
    assert resolve_model_dir("tiny-base", tmp_path) == cached           # served: nothing generated
    # an edit of any one generator source gives a key of its own ...
    package_dir = Path(files.__file__).resolve().parent
    read_bytes = Path.read_bytes
    keys = {key}
    for name in files._TINY_SOURCES:
        edited = package_dir / name
        monkeypatch.setattr(Path, "read_bytes", lambda path, edited=edited: read_bytes(path) + (
            b"# edited\n" if path == edited else b""))
        keys.add(files.tiny_source_hash())
    assert len(keys) == 1 + len(files._TINY_SOURCES)
    # ... so the cache entry is missed and the checkpoint made anew (under the last edit's key)
    made = []
    monkeypatch.setattr("checkpoint.tiny.make_tiny_checkpoint",
                        lambda out, model_type, **kw: made.append(model_type) or (out / "config.json").write_text("{}"))
    fresh = resolve_model_dir("tiny-base", tmp_path)
    assert made == ["base"] and fresh != cached and fresh.name == f"tiny-base-seed0-{files.tiny_source_hash()}"
    assert (fresh / "config.json").is_file()


def test_every_checkpoint_module_the_generator_imports_is_in_the_key():
    """A module of `checkpoint` that tiny.py reaches but the key does not hash would let an edit of
    it serve a stale cached checkpoint."""
    from import_graph import build_graph

    graph = build_graph(Path(files.__file__).resolve().parents[1], ["checkpoint"])
    reached, todo = set(), ["checkpoint.tiny"]
    while todo:
        module = todo.pop()
        if module not in reached:
            reached.add(module)
            todo.extend(graph.edges.get(module, ()))
    sources = {f"checkpoint.{name[:-3]}" for name in files._TINY_SOURCES}
    missing = reached - sources - {"checkpoint.errors"}   # exception classes: no byte of the checkpoint
    assert "checkpoint.tiny_init" in reached and not missing, sorted(missing)


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
