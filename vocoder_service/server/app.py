"""Process start-up and shutdown order of the vocoder.

1. gRPC side port up at once, health NOT_SERVING (probes can tell "loading" from "dead");
2. checkpoint resolved and decoder weights loaded, CUDA graphs captured;
3. ZeroMQ ROUTER bound, admin calls enabled, health SERVING, ready file written;
4. the loop runs until SIGTERM/SIGINT; then health NOT_SERVING, live streams drain (bounded),
   leftovers fail with UNAVAILABLE, sockets close, the gRPC server stops.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import threading
from pathlib import Path

import torch

from checkpoint.files import resolve_model_dir
from vocoder_service.runner import DecoderRunner
from vocoder_service.server.admin import AdminServer, VocoderAdminServicer
from vocoder_service.server.admin_jobs import AdminBridge
from vocoder_service.server.config import VocoderServiceConfig
from vocoder_service.server.loop import VocoderServer

logger = logging.getLogger(__name__)


def load_runner(config: VocoderServiceConfig) -> DecoderRunner:
    if config.cpu_threads:
        torch.set_num_threads(config.cpu_threads)
    model_dir = resolve_model_dir(config.model)
    runner = DecoderRunner.from_pretrained(model_dir, config.max_slots, config.device, config.resolved_dtype())
    if config.use_graphs:
        runner.capture_graphs(config.graph_batch_sizes(), config.graph_frame_sizes(),
                              int(config.graph_memory_budget_mb * 2**20), compile_step=config.compile_step)
    return runner


def write_ready_file(path: str, info: dict) -> None:
    """Atomically (rename) so a watcher never reads half a file."""
    target = Path(path)
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(info))
    os.replace(tmp, target)


def serve(config: VocoderServiceConfig) -> int:
    stop = threading.Event()
    holder: dict[str, VocoderServer] = {}

    def on_signal(signum, _frame) -> None:
        logger.info("signal %s: stopping", signal.Signals(signum).name)
        stop.set()
        if "server" in holder:
            holder["server"].request_stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    bridge = AdminBridge(config.admin_queue_size)
    servicer = VocoderAdminServicer(bridge, config.admin_timeout_s,
                                    max_frames=config.max_pending_frames + config.max_context_frames)
    admin_server = AdminServer(config.grpc_host, config.grpc_port)
    admin_server.add_admin(servicer)
    admin_server.start()
    try:
        runner = load_runner(config)
        if stop.is_set():
            return 0
        server = VocoderServer(config, runner, config.model, admin=bridge,
                               on_draining=lambda: admin_server.set_serving(False))
        holder["server"] = server
        if stop.is_set():  # a signal between the check above and the holder assignment
            server.request_stop()
        servicer.bind_model(runner.codebook_size, runner.sample_rate_hz)
        admin_server.set_serving(True)
        info = {"codes_endpoint": server.endpoint, "grpc_port": admin_server.port, "peer_id": server.peer_id,
                "pid": os.getpid(), "runner": runner.describe()}
        logger.info("vocoder ready: %s", info)
        if config.ready_file:
            write_ready_file(config.ready_file, info)
        server.run()
        return 0
    finally:
        admin_server.stop()
        logger.info("vocoder stopped")
