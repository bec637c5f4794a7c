"""`python -m gateway`: flags and QWEN3_TTS_GATEWAY_* env vars -> GatewayConfig -> serve until SIGTERM/SIGINT.

    python -m gateway --model tiny --talkers tcp://127.0.0.1:5601 --grpc-port 50051

Every config field is a flag (`max_streams` -> `--max-streams`) and an env var
(`QWEN3_TTS_GATEWAY_MAX_STREAMS`); a flag beats the env, the env beats the default. Lists are
comma-separated. On SIGTERM the gateway reports NOT_SERVING, refuses new calls and gives live
streams `drain_grace_s` to finish.
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Mapping
from dataclasses import fields

from gateway.config import GatewayConfig

logger = logging.getLogger(__name__)
ENV_PREFIX = "QWEN3_TTS_GATEWAY_"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m gateway", description="Qwen3-TTS public gRPC gateway.")
    for f in fields(GatewayConfig):
        default = f.default
        shown = ",".join(default) if isinstance(default, tuple) else repr(default)
        parser.add_argument("--" + f.name.replace("_", "-"), dest=f.name, default=None, metavar=f.name.upper(),
                            help=f"env {ENV_PREFIX}{f.name.upper()}; default {shown}")
    return parser


def config_from(argv: list[str], environ: Mapping[str, str]) -> GatewayConfig:
    parser = build_parser()
    args = parser.parse_args(argv)
    values = {}
    try:
        for f in fields(GatewayConfig):
            raw, source = getattr(args, f.name), "--" + f.name.replace("_", "-")
            if raw is None:
                raw, source = environ.get(ENV_PREFIX + f.name.upper()), ENV_PREFIX + f.name.upper()
            if raw is None:
                continue
            try:
                values[f.name] = (tuple(p for p in raw.split(",") if p) if isinstance(f.default, tuple)
                                  else type(f.default)(raw))
            except ValueError:
                raise ValueError(f"{source}: cannot read {raw!r} as {type(f.default).__name__}") from None
        return GatewayConfig(**values)
    except ValueError as exc:
        parser.error(str(exc))


async def serve(config: GatewayConfig) -> int:
    from checkpoint.files import resolve_model_dir  # no torch unless an uncached tiny model must be generated
    from gateway.server import GatewayServer

    server = GatewayServer(config, resolve_model_dir(config.model))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await server.start()
    await stop.wait()
    await server.drain(config.drain_grace_s)
    return 0


def main(argv: list[str] | None = None) -> int:
    config = config_from(sys.argv[1:] if argv is None else argv, os.environ)
    logging.basicConfig(level=config.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return asyncio.run(serve(config))
