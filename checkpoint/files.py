"""Turn a `--model` value into a local checkpoint directory.

Accepted values:
- a local directory in the official layout;
- an embedded tiny name: `tiny` (= `tiny-custom-voice`), `tiny-base`, `tiny-custom-voice`,
  `tiny-voice-design`, generated on first use into a cache directory;
- a Hugging Face hub id such as `Qwen/Qwen3-TTS-12Hz-1.7B-Base`, fetched with
  `huggingface_hub.snapshot_download`.
"""
from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import tempfile
from pathlib import Path

from checkpoint.errors import CheckpointError

logger = logging.getLogger(__name__)

TINY_MODEL_TYPES = {
    "tiny": "custom_voice",
    "tiny-base": "base",
    "tiny-custom-voice": "custom_voice",
    "tiny-voice-design": "voice_design",
}
CACHE_ENV = "QWEN3_TTS_CACHE"
DEFAULT_CACHE_DIR = Path("~/.cache/qwen3-tts-serve")
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$")
# Sources whose content decides the tiny checkpoint's bytes; their hash names the cache entry,
# so editing any of them regenerates instead of serving a stale checkpoint.
_TINY_SOURCES = (
    "configs.py", "codec_shapes.py", "talker_shapes.py", "layout.py", "tiny.py", "tiny_init.py",
    "safetensors_io.py", "bpe_learn.py", "text_tokenizer.py", "tiny_corpus.py",
)


def resolve_model_dir(name_or_path: str | Path, cache_dir: str | Path | None = None) -> Path:
    """A local directory holding the checkpoint named by `name_or_path`.

    `cache_dir` is where tiny checkpoints are generated (default `$QWEN3_TTS_CACHE` or
    `~/.cache/qwen3-tts-serve`); for hub ids it is passed to `snapshot_download` (default: the
    Hugging Face cache). Raises CheckpointError when nothing matches or the hub is unreachable.
    """
    text = str(name_or_path)
    path = Path(text).expanduser()
    if path.is_dir():
        return path.resolve()
    if path.exists():
        raise CheckpointError(f"model path {path} is a file; expected a checkpoint directory")
    if text in TINY_MODEL_TYPES:
        return _tiny_dir(text, _tiny_cache_root(cache_dir))
    if _HUB_ID.match(text):
        return _download(text, cache_dir)
    raise CheckpointError(
        f"model {text!r} not found: it is not a local directory, not one of the embedded tiny "
        f"models {sorted(TINY_MODEL_TYPES)}, and not a hub id like 'Qwen/Qwen3-TTS-12Hz-1.7B-Base'"
    )


def _tiny_cache_root(cache_dir: str | Path | None) -> Path:
    if cache_dir is None:
        cache_dir = os.environ.get(CACHE_ENV) or DEFAULT_CACHE_DIR
    return Path(cache_dir).expanduser() / "tiny"


def tiny_source_hash() -> str:
    digest = hashlib.sha256()
    package_dir = Path(__file__).resolve().parent
    for name in _TINY_SOURCES:
        digest.update(name.encode())
        digest.update((package_dir / name).read_bytes())
    return digest.hexdigest()[:12]


def _tiny_dir(name: str, root: Path) -> Path:
    """Generate (once) the tiny checkpoint `name`; safe when several processes race on it."""
    model_type = TINY_MODEL_TYPES[name]
    canonical = "tiny-" + model_type.replace("_", "-")  # "tiny" shares tiny-custom-voice's files
    target = root / f"{canonical}-seed0-{tiny_source_hash()}"
    if target.is_dir():
        return target
    from checkpoint.tiny import make_tiny_checkpoint  # imports torch; only needed on a miss

    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{canonical}.tmp-", dir=root))
    try:
        os.chmod(tmp, 0o755)  # mkdtemp makes it private; the cache may be shared
        make_tiny_checkpoint(tmp, model_type, seed=0, size="tiny")
        try:
            # rename of a directory is atomic; it fails if another process already won the race
            os.rename(tmp, target)
            logger.info("generated tiny checkpoint %s at %s", canonical, target)
        except OSError:
            if not target.is_dir():
                raise
            logger.debug("tiny checkpoint %s was generated concurrently by another process", canonical)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def _download(repo_id: str, cache_dir: str | Path | None) -> Path:
    from huggingface_hub import snapshot_download

    logger.info("fetching %s from the Hugging Face hub", repo_id)
    try:
        local = snapshot_download(repo_id, cache_dir=str(cache_dir) if cache_dir is not None else None)
    except (OSError, ValueError) as exc:  # hub errors are OSError (HTTP, offline) or ValueError (bad id)
        raise CheckpointError(
            f"could not fetch model {repo_id!r} from the Hugging Face hub ({type(exc).__name__}: "
            f"{' '.join(str(exc).split())[:300]}); check the network, HF_ENDPOINT and HF_TOKEN, "
            f"or pass a local checkpoint directory"
        ) from exc
    return Path(local)
