"""`python -m gateway`: flags and QWEN3_TTS_GATEWAY_* env vars -> GatewayConfig -> serve until SIGTERM/SIGINT.

    python -m gateway --model tiny --talkers tcp://127.0.0.1:5601 --grpc-port 50051

Every config field is a flag (`max_streams` -> `--max-streams`) and an env var
(`QWEN3_TTS_GATEWAY_MAX_STREAMS`); a flag beats the env, the env beats the default. Lists are
comma-separated. On SIGTERM the gateway reports NOT_SERVING, refuses new calls and gives live
streams `drain_grace_s` to finish.
"""
from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import Mapping

from gateway.config import GatewayConfig
from service_common import cli_config, event_loop
from service_common.startup import run_main

logger = logging.getLogger(__name__)
ENV_PREFIX = "QWEN3_TTS_GATEWAY_"


def build_parser():
    return cli_config.build_parser(GatewayConfig, ENV_PREFIX, "python -m gateway", "Qwen3-TTS public gRPC gateway.")


def config_from(argv: list[str], environ: Mapping[str, str]) -> GatewayConfig:
    """Flags over env over defaults; exits with a usage error naming the bad flag or variable."""
    return cli_config.config_from(GatewayConfig, ENV_PREFIX, build_parser(), argv, environ)


async def serve(config: GatewayConfig) -> int:
    from checkpoint.files import resolve_model_dir  # no torch unless an uncached tiny model must be generated
    from gateway.server import GatewayServer
    from gateway.workers import for_worker

    config = for_worker(config)   # a worker's own audio endpoint and metrics port
    logger.info("event loop: %s", type(asyncio.get_running_loop()).__module__.split(".")[0])
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
    argv = sys.argv[1:] if argv is None else argv
    config = config_from(argv, os.environ)
    worker = f"[worker {config.worker_index}] " if config.reuse_port else ""   # one of --workers N
    logging.basicConfig(level=config.log_level.upper(),
                        format=f"%(asctime)s %(levelname)s {worker}%(name)s: %(message)s")
    if config.workers > 1:   # this process supervises; the workers serve (gateway/workers.py)
        from gateway.workers import supervise
        return run_main("python -m gateway", lambda: supervise(config, argv))
    return run_main("python -m gateway", lambda: event_loop.run(serve(config), config.event_loop))
