"""`python -m talker_service`: flags and QWEN3_TTS_TALKER_* env vars -> TalkerServiceConfig -> serve.

Every config field is a flag (`max_slots` -> `--max-slots`) and an env var
(`QWEN3_TTS_TALKER_MAX_SLOTS`); a flag beats the env, the env beats the default.

    python -m talker_service --model tiny --device cpu --bind tcp://127.0.0.1:* \\
        --vocoders tcp://127.0.0.1:5701,tcp://127.0.0.1:5702 --grpc-port 0 --ready-file /tmp/talker.json
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Mapping
from dataclasses import fields

from talker_service.server.config import TalkerServiceConfig
# the flag/env conversion rules are the vocoder's, so both processes read settings the same way
from vocoder_service.main import _convert, _default

ENV_PREFIX = "QWEN3_TTS_TALKER_"


def env_name(field_name: str) -> str:
    return ENV_PREFIX + field_name.upper()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m talker_service",
        description="Qwen3-TTS 12 Hz talker: text in over ZeroMQ, codec frames out to vocoders; gRPC side port.")
    for f in fields(TalkerServiceConfig):
        default = _default(f)
        flag = "--" + f.name.replace("_", "-")
        shown = ",".join(map(str, default)) if isinstance(default, tuple) else repr(default)
        text = f"env {env_name(f.name)}; default {shown}"
        if isinstance(default, bool):
            parser.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=None, help=text)
        else:
            parser.add_argument(flag, dest=f.name, default=None, metavar=f.name.upper(), help=text)
    return parser


def config_from(argv: list[str], environ: Mapping[str, str]) -> TalkerServiceConfig:
    """Flags over env over defaults; exits with a usage error naming the bad flag or variable."""
    parser = build_parser()
    args = parser.parse_args(argv)
    values = {}
    try:
        for f in fields(TalkerServiceConfig):
            raw, source = getattr(args, f.name), "--" + f.name.replace("_", "-")
            if raw is None:
                raw, source = environ.get(env_name(f.name)), env_name(f.name)
            if raw is not None:
                values[f.name] = _convert(f.name, _default(f), raw, source)
        return TalkerServiceConfig(**values)
    except ValueError as exc:
        parser.error(str(exc))


def main(argv: list[str] | None = None) -> int:
    config = config_from(sys.argv[1:] if argv is None else argv, os.environ)
    logging.basicConfig(level=config.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from talker_service.server.app import serve   # imports torch: after argument errors are reported

    return serve(config)
