"""`python -m talker_service`: flags and QWEN3_TTS_TALKER_* env vars -> TalkerServiceConfig -> serve.

Every config field is a flag (`max_slots` -> `--max-slots`) and an env var
(`QWEN3_TTS_TALKER_MAX_SLOTS`); a flag beats the env, the env beats the default.

    python -m talker_service --model tiny --device cpu --bind tcp://127.0.0.1:* \\
        --vocoders tcp://127.0.0.1:5701,tcp://127.0.0.1:5702 --grpc-port 0 --ready-file /tmp/talker.json
"""
from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping

from service_common import cli_config
from service_common.startup import run_main
from talker_service.server.config import TalkerServiceConfig

ENV_PREFIX = "QWEN3_TTS_TALKER_"


def env_name(field_name: str) -> str:
    return cli_config.env_name(ENV_PREFIX, field_name)


def build_parser():
    return cli_config.build_parser(
        TalkerServiceConfig, ENV_PREFIX, "python -m talker_service",
        "Qwen3-TTS 12 Hz talker: text in over ZeroMQ, codec frames out to vocoders; gRPC side port.")


def config_from(argv: list[str], environ: Mapping[str, str]) -> TalkerServiceConfig:
    """Flags over env over defaults; exits with a usage error naming the bad flag or variable."""
    return cli_config.config_from(TalkerServiceConfig, ENV_PREFIX, build_parser(), argv, environ)


def main(argv: list[str] | None = None) -> int:
    config = config_from(sys.argv[1:] if argv is None else argv, os.environ)
    logging.basicConfig(level=config.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from talker_service.server.app import serve   # imports torch: after argument errors are reported

    return run_main("python -m talker_service", lambda: serve(config))
