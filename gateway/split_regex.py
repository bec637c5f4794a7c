"""Which pre-tokenizer split regex the official processor ends up with for a checkpoint.

The checkpoints ship Qwen2's split regex (vocab.json + merges.txt, `Qwen2Tokenizer`). The official
`qwen_tts` loads its processor with `fix_mistral_regex=True`, and Transformers 5 then replaces that
regex with the one it writes for Mistral tokenizers when a *local* checkpoint's `config.json`
  - has no `transformers_version`, or
  - names a version below 5.0.0 and a Mistral-family `model_type` (or none).
A config that names 5.0.0 or later, or a 4.x version with any other model type, keeps Qwen2's regex;
so does a folder with no `config.json` at all (Transformers 5.17,
`TokenizersBackend._patch_mistral_regex`).

The official Qwen3-TTS checkpoints' `config.json` carries `"transformers_version": "4.57.3"` and
`"model_type": "qwen3_tts"` (a mirror of Qwen3-TTS-12Hz-1.7B-CustomVoice's config.json), so real
checkpoints get Qwen2's regex. The difference is visible on mixed-case words: the replacement regex
splits "iPhone McDonald's" into i|Phone| Mc|Donald|'s, Qwen2's into iPhone| McDonald|'s.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

from packaging.version import InvalidVersion, Version

logger = logging.getLogger(__name__)

QWEN2_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"""
                 r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
# What Transformers 5 swaps in under fix_mistral_regex=True: letters split at case changes, no
# contraction alternative, and "/" joins a punctuation run's trailing newlines.
MISTRAL_FIX_PATTERN = (r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|"""
                       r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}|"""
                       r""" ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
_MISTRAL_MODEL_TYPES = ("mistral", "mistral3", "voxtral", "ministral", "pixtral")


def _version(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


def split_pattern_for(model_dir: str | Path) -> tuple[str, str]:
    """(regex, why) that the official processor uses for the checkpoint in `model_dir`."""
    config_path = Path(model_dir) / "config.json"
    if not config_path.is_file():
        return QWEN2_PATTERN, "no config.json: the checkpoint's own Qwen2 regex"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    saved_with = config.get("transformers_version")
    model_type = config.get("model_type")
    parsed = _version(saved_with) if saved_with else None
    if parsed is not None and parsed >= Version("5.0.0"):
        return QWEN2_PATTERN, f"saved with transformers {saved_with}: the checkpoint's own Qwen2 regex"
    if parsed is not None and model_type is not None and model_type not in _MISTRAL_MODEL_TYPES:
        return QWEN2_PATTERN, f"saved with transformers {saved_with}, model_type {model_type}: Qwen2 regex"
    # Transformers parses the version with packaging too; one it cannot parse fails there, so a
    # checkpoint like that does not load officially at all. Treat it as absent.
    return MISTRAL_FIX_PATTERN, (f"config.json names transformers_version={saved_with!r}, model_type={model_type!r}: "
                                 "the regex Transformers 5 substitutes under fix_mistral_regex=True")
