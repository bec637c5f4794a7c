"""Process start-up and shutdown order of the vocoder.

1. gRPC side port up at once, health NOT_SERVING (probes can tell "loading" from "dead"), and
   the Prometheus endpoint when asked (`--metrics-port`; only `qwen3_tts_vocoder_serving 0` yet);
2. checkpoint resolved and decoder weights loaded, CUDA graphs captured;
3. ZeroMQ ROUTER bound, admin calls enabled, health SERVING, ready file written;
4. the loop runs until SIGTERM/SIGINT; then health NOT_SERVING, live streams drain (bounded),
   leftovers fail with UNAVAILABLE, sockets close, the gRPC server stops.
"""
from __future__ import annotations

import logging
import os

import torch

from checkpoint.files import resolve_model_dir
from service_common.memory_sizing import graph_budget_within, resolved_fraction
from service_common.metrics import MetricsServer
from service_common.process import StopSignal, announce_ready
from vocoder_service.runtime.compile_plan import use_cache_dir
from vocoder_service.runtime.runner import DecoderRunner
from vocoder_service.server.admin import VocoderAdminServicer, side_port
from vocoder_service.server.admin_jobs import AdminBridge
from vocoder_service.server.config import VocoderServiceConfig
from vocoder_service.server.loop import VocoderServer
from vocoder_service.server.metrics import VocoderMetrics

logger = logging.getLogger(__name__)

AUTO_CPU_GRAPH_BUDGET_BYTES = 4 * 2**30   # CPU "graphs" are emulated eager steps; only the cap applies


def load_runner(config: VocoderServiceConfig) -> DecoderRunner:
    if config.cpu_threads:
        torch.set_num_threads(config.cpu_threads)
    model_dir = resolve_model_dir(config.model)
    runner = DecoderRunner.from_pretrained(model_dir, config.resolved_max_slots(), config.device,
                                           config.resolved_dtype())
    if config.use_graphs:
        plan = None
        if runner.device.type == "cuda":   # CPU steps run eagerly: nothing to compile for
            plan = runner.compile_plan(config.resolved_compile_max_row_frames(), config.compile_dynamic_frames)
            if config.compile_cache_dir and not plan.is_empty:
                use_cache_dir(config.compile_cache_dir)
        report = runner.capture_graphs(config.graph_batch_sizes(), config.graph_frame_sizes(),
                                       graph_budget_bytes(config), compile_plan=plan,
                                       cudnn_benchmark_min_row_frames=config.cudnn_benchmark_min_row_frames)
        if report.compiled:
            logger.info("compiled decode graphs (kind, seconds to ready): %s", report.compiled)
        if report.compile_failed:
            logger.warning("serving with plain graphs where compiling failed: %s", report.compile_failed)
    return runner


def graph_budget_bytes(config: VocoderServiceConfig) -> int:
    """The configured graph budget, or (auto, CUDA) what this process's GPU share leaves once the
    weights and slot state are in: captures beyond it are skipped (and fall back to eager)."""
    if config.graph_memory_budget_mb > 0:
        return int(config.graph_memory_budget_mb * 2**20)
    if not config.device.startswith("cuda"):
        return AUTO_CPU_GRAPH_BUDGET_BYTES
    device = torch.device(config.device)
    free_bytes, total_bytes = torch.cuda.mem_get_info(device)
    held_bytes = torch.cuda.memory_reserved(device)
    budget_bytes = graph_budget_within(total_bytes=total_bytes, free_bytes=free_bytes, held_bytes=held_bytes,
                                       fraction=config.gpu_memory_fraction)
    logger.info("vocoder graph budget %.1f GiB (%.2f of %.1f GiB, %.1f GiB held)", budget_bytes / 2**30,
                resolved_fraction(config.gpu_memory_fraction), total_bytes / 2**30, held_bytes / 2**30)
    return budget_bytes


def serve(config: VocoderServiceConfig) -> int:
    stop = StopSignal()
    bridge = AdminBridge(config.admin_queue_size)
    servicer = VocoderAdminServicer(bridge, config.admin_timeout_s,
                                    max_frames=config.max_pending_frames + config.max_context_frames)
    admin_server = side_port(config.grpc_host, config.grpc_port, servicer)
    admin_server.start()
    metrics, metrics_server = VocoderMetrics(), None
    try:
        if config.metrics_port >= 0:   # a taken port ends start-up here, before the model loads
            metrics_server = MetricsServer(metrics.registry, config.metrics_host, config.metrics_port)
        runner = load_runner(config)
        if stop.is_set():
            return 0
        server = VocoderServer(config, runner, config.model, admin=bridge,
                               on_draining=lambda: admin_server.set_serving(False))
        stop.attach(server.request_stop)
        metrics.attach(server)
        servicer.bind_model(runner.codebook_size, runner.sample_rate_hz)
        admin_server.set_serving(True)
        info = {"codes_endpoint": server.endpoint, "grpc_port": admin_server.port, "peer_id": server.peer_id,
                "metrics_port": metrics_server.port if metrics_server else 0,   # 0: off, as the gateway's
                "pid": os.getpid(), "runner": runner.describe()}
        announce_ready("vocoder", info, config.ready_file)
        server.run()
        return 0
    finally:
        admin_server.stop()
        if metrics_server is not None:
            metrics_server.stop()
        logger.info("vocoder stopped")
