"""`python -m vocoder_service`: flags and QWEN3_TTS_VOCODER_* env vars -> VocoderServiceConfig -> serve.

Every config field is a flag (`max_slots` -> `--max-slots`) and an env var
(`QWEN3_TTS_VOCODER_MAX_SLOTS`); a flag beats the env, the env beats the default. Lists are
comma-separated (`--capture-batch-sizes 1,2,4,8`), booleans take 1/0/true/false (`--no-use-graphs`).

    python -m vocoder_service --model tiny --device cpu --bind tcp://127.0.0.1:5701 --grpc-port 0
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Mapping
from dataclasses import MISSING, fields

from vocoder_service.server.config import VocoderServiceConfig

ENV_PREFIX = "QWEN3_TTS_VOCODER_"
_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off"}


def env_name(field_name: str) -> str:
    return ENV_PREFIX + field_name.upper()


def _default(f):
    return f.default if f.default is not MISSING else f.default_factory()


def _convert(name: str, default, raw, source: str):
    if isinstance(default, bool):
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in _TRUE | _FALSE:
            return text in _TRUE
        raise ValueError(f"{source}: expected 1/0/true/false, got {raw!r}")
    try:
        if isinstance(default, tuple):
            return tuple(int(part) for part in str(raw).split(",") if part.strip())
        return type(default)(raw)
    except ValueError:
        raise ValueError(f"{source}: cannot read {raw!r} as {type(default).__name__}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m vocoder_service",
        description="Qwen3-TTS 12 Hz vocoder: codec frames in over ZeroMQ, PCM out; gRPC health/admin side port.",
    )
    for f in fields(VocoderServiceConfig):
        default = _default(f)
        flag = "--" + f.name.replace("_", "-")
        text = f"env {env_name(f.name)}; default {','.join(map(str, default)) if isinstance(default, tuple) else default!r}"
        if isinstance(default, bool):
            parser.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=None, help=text)
        else:
            parser.add_argument(flag, dest=f.name, default=None, metavar=f.name.upper(), help=text)
    return parser


def config_from(argv: list[str], environ: Mapping[str, str]) -> VocoderServiceConfig:
    """Flags over env over defaults; exits with a usage error naming the bad flag or variable."""
    parser = build_parser()
    args = parser.parse_args(argv)
    values = {}
    try:
        for f in fields(VocoderServiceConfig):
            raw, source = getattr(args, f.name), "--" + f.name.replace("_", "-")
            if raw is None:
                raw, source = environ.get(env_name(f.name)), env_name(f.name)
            if raw is not None:
                values[f.name] = _convert(f.name, _default(f), raw, source)
        return VocoderServiceConfig(**values)
    except ValueError as exc:
        parser.error(str(exc))


def main(argv: list[str] | None = None) -> int:
    config = config_from(sys.argv[1:] if argv is None else argv, os.environ)
    logging.basicConfig(level=config.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from vocoder_service.server.app import serve  # imports torch: after argument errors are reported

    return serve(config)
