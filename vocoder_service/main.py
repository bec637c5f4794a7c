"""`python -m vocoder_service`: flags and QWEN3_TTS_VOCODER_* env vars -> VocoderServiceConfig -> serve.

Every config field is a flag (`max_slots` -> `--max-slots`) and an env var
(`QWEN3_TTS_VOCODER_MAX_SLOTS`); a flag beats the env, the env beats the default. Lists are
comma-separated (`--capture-batch-sizes 1,2,4,8`), booleans take 1/0/true/false (`--no-use-graphs`).

    python -m vocoder_service --model tiny --device cpu --bind tcp://127.0.0.1:5701 --grpc-port 0
"""
from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping

from service_common import cli_config
from service_common.startup import run_main
from vocoder_service.server.config import VocoderServiceConfig

ENV_PREFIX = "QWEN3_TTS_VOCODER_"


def env_name(field_name: str) -> str:
    return cli_config.env_name(ENV_PREFIX, field_name)


def build_parser():
    return cli_config.build_parser(
        VocoderServiceConfig, ENV_PREFIX, "python -m vocoder_service",
        "Qwen3-TTS 12 Hz vocoder: codec frames in over ZeroMQ, PCM out; gRPC health/admin side port.")


def config_from(argv: list[str], environ: Mapping[str, str]) -> VocoderServiceConfig:
    """Flags over env over defaults; exits with a usage error naming the bad flag or variable."""
    return cli_config.config_from(VocoderServiceConfig, ENV_PREFIX, build_parser(), argv, environ)


def main(argv: list[str] | None = None) -> int:
    config = config_from(sys.argv[1:] if argv is None else argv, os.environ)
    logging.basicConfig(level=config.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from vocoder_service.server.app import serve  # imports torch: after argument errors are reported

    return run_main("python -m vocoder_service", lambda: serve(config))
