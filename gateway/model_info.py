"""What the gateway knows about the served model, read from the checkpoint's JSON files only.

The gateway resolves names to ids (speakers, languages) and defaults to values before anything
reaches a talker, so it needs `config.json` and `generation_config.json` but never the weights
(and never torch).
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from protos.tts.v1 import voices_pb2

logger = logging.getLogger(__name__)

NATIVE_SAMPLE_RATE_HZ = 24000
_MODEL_TYPES = {
    "base": voices_pb2.MODEL_TYPE_BASE,
    "custom_voice": voices_pb2.MODEL_TYPE_CUSTOM_VOICE,
    "voice_design": voices_pb2.MODEL_TYPE_VOICE_DESIGN,
}
# Defaults of the official generate() when generation_config.json lacks a key.
_FALLBACK_GENERATION = {
    "do_sample": True, "temperature": 0.9, "top_k": 50, "top_p": 1.0, "repetition_penalty": 1.05,
    "subtalker_dosample": True, "subtalker_temperature": 0.9, "subtalker_top_k": 50,
    "subtalker_top_p": 1.0, "max_new_tokens": 2048, "min_new_tokens": 2,
}


# Talker max_position_embeddings of every released Qwen3-TTS checkpoint, for a config.json without it.
_DEFAULT_MAX_POSITIONS = 32768


@dataclass(frozen=True)
class ModelInfo:
    name: str
    model_type: str                      # "base" | "custom_voice" | "voice_design"
    model_size: str                      # "1b7" | "0b6"
    model_dir: Path
    speaker_ids: dict[str, int] = field(default_factory=dict)
    speaker_dialects: dict[str, str] = field(default_factory=dict)   # speaker -> dialect language
    language_ids: dict[str, int] = field(default_factory=dict)       # dialects included
    generation: dict = field(default_factory=dict)
    max_positions: int = _DEFAULT_MAX_POSITIONS  # talker context (prompt plus frames) of the checkpoint

    @property
    def languages(self) -> list[str]:
        """"auto" and the plain languages; dialects are reached through their speakers only."""
        return ["auto"] + sorted(k for k in self.language_ids if "dialect" not in k)

    @property
    def supports_instruct(self) -> bool:
        # 0.6B CustomVoice drops the instruction in the official wrapper; Base has no input for it.
        if self.model_type == "voice_design":
            return True
        return self.model_type == "custom_voice" and self.model_size != "0b6"

    @property
    def proto_model_type(self) -> int:
        return _MODEL_TYPES[self.model_type]

    def language_codec_id(self, language: str, speaker: str = "") -> int:
        """0 for auto; a dialect speaker turns chinese/auto into its dialect, as the official prompt does."""
        language_id = 0 if language == "auto" else self.language_ids[language]
        dialect = self.speaker_dialects.get(speaker, "")
        if dialect and language in ("chinese", "auto") and dialect in self.language_ids:
            language_id = self.language_ids[dialect]
        return language_id

    def describe(self, is_default: bool = True) -> voices_pb2.ModelVoices:
        return voices_pb2.ModelVoices(
            model=self.name, model_type=self.proto_model_type, model_size=self.model_size,
            speakers=[voices_pb2.Speaker(name=n, dialect=self.speaker_dialects.get(n, ""))
                      for n in sorted(self.speaker_ids)],
            languages=self.languages, supports_instruct=self.supports_instruct,
            native_sample_rate_hz=NATIVE_SAMPLE_RATE_HZ, is_default=is_default,
        )


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"missing file: {path}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not valid JSON: {exc}") from None


def load_model_info(model_dir: str | Path, name: str) -> ModelInfo:
    """ModelInfo from `model_dir`/config.json (+ generation_config.json when present)."""
    model_dir = Path(model_dir)
    config = _read_json(model_dir / "config.json")
    model_type = config.get("tts_model_type")
    if model_type not in _MODEL_TYPES:
        raise ValueError(f"{model_dir / 'config.json'}: tts_model_type={model_type!r}; "
                         f"expected one of {sorted(_MODEL_TYPES)}")
    talker = config.get("talker_config") or {}
    generation = dict(_FALLBACK_GENERATION)
    if (model_dir / "generation_config.json").is_file():
        generation.update(_read_json(model_dir / "generation_config.json"))
    dialects = {k.lower(): str(v).lower() for k, v in (talker.get("spk_is_dialect") or {}).items() if v}
    info = ModelInfo(
        name=name, model_type=model_type, model_size=str(config.get("tts_model_size", "1b7")),
        model_dir=model_dir,
        speaker_ids={k.lower(): int(v) for k, v in (talker.get("spk_id") or {}).items()},
        speaker_dialects=dialects,
        language_ids={k.lower(): int(v) for k, v in (talker.get("codec_language_id") or {}).items()},
        generation=generation,
        max_positions=int(talker.get("max_position_embeddings", _DEFAULT_MAX_POSITIONS)),
    )
    logger.info("model %s: %s %s, %d speakers, %d languages", name, info.model_type, info.model_size,
                len(info.speaker_ids), len(info.languages))
    return info
