"""Open and validate a Qwen3-TTS 12 Hz checkpoint before any weight is read.

`open_checkpoint` checks every required file, the config's model/tokenizer type, and every
tensor name and shape in both safetensors headers (header only, so this costs a few KB of I/O
even for the 4 GB 1.7B model). Tensors are read later, on demand, with a name prefix so a
service loads only its part (e.g. the vocoder reads `decoder.*` of the speech tokenizer).
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors import safe_open

from checkpoint import layout
from checkpoint.configs import MODEL_TYPES, generation_config
from checkpoint.errors import CheckpointError
from checkpoint.files import resolve_model_dir
from checkpoint.safetensors_io import read_header

logger = logging.getLogger(__name__)

MAX_LISTED_PROBLEMS = 20


@dataclass
class ModelCheckpoint:
    root: Path
    config: dict = field(repr=False)
    generation_config: dict = field(repr=False)  # official defaults filled in for missing keys
    tts_model_type: str  # "base" | "custom_voice" | "voice_design"
    tts_model_size: str  # "1b7" | "0b6" as written in config.json
    speech_tokenizer_dir: Path = field(repr=False)
    _weight_files: dict[str, Path] = field(repr=False, default_factory=dict)  # tensor -> file
    _st_weight_files: dict[str, Path] = field(repr=False, default_factory=dict)

    def tensors(self, prefix: str = "") -> dict[str, torch.Tensor]:
        """Tensors of model.safetensors whose names start with `prefix` (all by default)."""
        return _load(self._weight_files, prefix)

    def speech_tokenizer_config(self) -> dict:
        return _read_json(self.speech_tokenizer_dir / layout.CONFIG_FILE)

    def speech_tokenizer_tensors(self, prefix: str = "") -> dict[str, torch.Tensor]:
        """Tensors of speech_tokenizer/model.safetensors starting with `prefix` ("decoder.", "encoder.")."""
        return _load(self._st_weight_files, prefix)

    def text_tokenizer(self):
        from checkpoint.text_tokenizer import load_text_tokenizer

        return load_text_tokenizer(self.root)


def open_checkpoint(name_or_path: str | Path, cache_dir: str | Path | None = None) -> ModelCheckpoint:
    """Resolve (see `checkpoint.files.resolve_model_dir`) and validate a checkpoint."""
    root = resolve_model_dir(name_or_path, cache_dir=cache_dir)
    for name in layout.REQUIRED_FILES:
        if name == layout.WEIGHTS_FILE or name.endswith("/" + layout.WEIGHTS_FILE):
            continue  # may be sharded; checked by _weight_files
        if not (root / name).is_file():
            raise CheckpointError(f"missing file: {root / name}")
    config = _read_json(root / layout.CONFIG_FILE)
    _check_config(config, root / layout.CONFIG_FILE)
    st_dir = root / layout.SPEECH_TOKENIZER_DIR
    st_config = _read_json(st_dir / layout.CONFIG_FILE)
    if st_config.get("model_type") != layout.TOKENIZER_TYPE_12HZ:
        raise CheckpointError(
            f"{st_dir / layout.CONFIG_FILE}: model_type {st_config.get('model_type')!r} is not the "
            f"12 Hz speech tokenizer {layout.TOKENIZER_TYPE_12HZ!r}"
        )

    weight_files = _weight_files(root)
    st_weight_files = _weight_files(st_dir)
    expected = _expected_shapes(layout.expected_tensor_shapes, config, root / layout.CONFIG_FILE)
    _check_shapes(weight_files, expected, root / layout.WEIGHTS_FILE)
    expected = _expected_shapes(layout.expected_speech_tokenizer_shapes, st_config, st_dir / layout.CONFIG_FILE)
    _check_shapes(st_weight_files, expected, st_dir / layout.WEIGHTS_FILE)

    gen = generation_config()
    gen.update(_read_json(root / layout.GENERATION_CONFIG_FILE))
    checkpoint = ModelCheckpoint(
        root=root,
        config=config,
        generation_config=gen,
        tts_model_type=config["tts_model_type"],
        tts_model_size=str(config.get("tts_model_size", "")),
        speech_tokenizer_dir=st_dir,
        _weight_files=weight_files,
        _st_weight_files=st_weight_files,
    )
    logger.info("opened %s checkpoint (%s) at %s", checkpoint.tts_model_type, checkpoint.tts_model_size, root)
    return checkpoint


def _check_config(config: dict, path: Path) -> None:
    if config.get("model_type") != layout.MODEL_TYPE:
        raise CheckpointError(f"{path}: model_type {config.get('model_type')!r} is not {layout.MODEL_TYPE!r}")
    model_type = config.get("tts_model_type")
    if model_type not in MODEL_TYPES:
        raise CheckpointError(f"{path}: unknown tts_model_type {model_type!r}; expected one of {list(MODEL_TYPES)}")
    tokenizer_type = config.get("tokenizer_type")
    if tokenizer_type != layout.TOKENIZER_TYPE_12HZ:
        raise CheckpointError(
            f"{path}: tokenizer_type {tokenizer_type!r} is not supported; only the 12 Hz models "
            f"({layout.TOKENIZER_TYPE_12HZ!r}) are"
        )
    if not isinstance(config.get("talker_config"), dict):
        raise CheckpointError(f"{path}: missing 'talker_config'")


def _expected_shapes(shapes_of, config: dict, config_path: Path) -> dict[str, tuple[int, ...]]:
    """`shapes_of(config)`, with a malformed config reported as a CheckpointError naming the file."""
    try:
        return shapes_of(config)
    except (ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"{config_path}: cannot derive tensor shapes ({type(exc).__name__}: {exc})") from exc


def _weight_files(directory: Path) -> dict[str, Path]:
    """tensor name -> the safetensors file holding it (one file or the shards of an index)."""
    single = directory / layout.WEIGHTS_FILE
    index = directory / layout.WEIGHTS_INDEX_FILE
    if single.is_file():
        return {name: single for name in read_header(single)}
    if index.is_file():
        weight_map = _read_json(index).get("weight_map")
        if not isinstance(weight_map, dict):
            raise CheckpointError(f"{index}: no 'weight_map'")
        for shard in sorted(set(weight_map.values())):
            if not (directory / shard).is_file():
                raise CheckpointError(f"missing file: shard {directory / shard} listed in {index}")
        return {name: directory / shard for name, shard in weight_map.items()}
    raise CheckpointError(f"missing file: {single} (nor a sharded {index})")


def _check_shapes(files: dict[str, Path], expected: dict[str, tuple[int, ...]], source: Path) -> None:
    actual: dict[str, tuple[int, ...]] = {}
    for path in sorted(set(files.values())):
        actual.update({name: shape for name, (_, shape) in read_header(path).items()})
    problems = [f"missing tensor {name!r} (expected shape {shape})" for name, shape in expected.items() if name not in actual]
    problems += [
        f"wrong shape for tensor {name!r}: expected {shape}, got {actual[name]}"
        for name, shape in expected.items()
        if name in actual and actual[name] != shape
    ]
    if problems:
        more = len(problems) - MAX_LISTED_PROBLEMS
        listed = "; ".join(problems[:MAX_LISTED_PROBLEMS]) + (f"; (+{more} more)" if more > 0 else "")
        raise CheckpointError(f"{source}: {listed}")
    unexpected = sorted(set(actual) - set(expected))
    if unexpected:  # newer exports may carry extras; loading ignores them
        logger.warning("%s: %d unexpected tensors ignored, e.g. %s", source, len(unexpected), unexpected[:3])


def _load(files: dict[str, Path], prefix: str) -> dict[str, torch.Tensor]:
    by_file: dict[Path, list[str]] = {}
    for name, path in files.items():
        if name.startswith(prefix):
            by_file.setdefault(path, []).append(name)
    tensors: dict[str, torch.Tensor] = {}
    for path, names in by_file.items():
        with safe_open(str(path), framework="pt") as f:
            for name in names:
                tensors[name] = f.get_tensor(name)
    return tensors


def _read_json(path: Path) -> dict:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"missing file: {path}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise CheckpointError(f"{path}: expected a JSON object")
    return value
