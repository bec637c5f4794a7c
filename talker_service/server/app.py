"""Process start-up and shutdown order of the talker.

1. gRPC side port up at once, health NOT_SERVING (probes can tell "loading" from "dead"), and
   the Prometheus endpoint when asked (`--metrics-port`; only `qwen3_tts_talker_serving 0` yet);
2. checkpoint resolved, talker weights loaded into the engine;
3. ZeroMQ ROUTER bound, DEALERs to the vocoders connected, health SERVING, ready file written;
4. the loop runs until SIGTERM/SIGINT; then health NOT_SERVING, live requests fail UNAVAILABLE,
   sockets close, the gRPC server stops.
"""
from __future__ import annotations

import json
import logging
import os

import torch

from checkpoint.configs import generation_config as default_generation_config
from checkpoint.files import resolve_model_dir
from service_common.metrics import MetricsServer
from service_common.process import StopSignal, announce_ready
from talker_service.engine import ModelRunner, TalkerEngine
from talker_service.engine.request_warmup import warm_up_requests
from talker_service.server.admin import TalkerAdminServicer, side_port
from talker_service.server.admin_jobs import AdminJobs
from talker_service.server.config import TalkerServiceConfig
from talker_service.server.loop import TalkerServer
from talker_service.server.metrics import TalkerMetrics
from talker_service.server.sizing import sized_config
from talker_service.server.start import StartReader
from talker_service.server.voice_jobs import VoiceEncoding

logger = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
          "float16": torch.float16, "fp16": torch.float16}


def load_engine(config: TalkerServiceConfig) -> tuple[TalkerEngine, dict]:
    """The engine and the checkpoint's generation config (defaults for admin calls)."""
    if config.cpu_threads:
        torch.set_num_threads(config.cpu_threads)
    model_dir = resolve_model_dir(config.model)
    config = sized_config(config, model_dir)
    runner = ModelRunner.from_checkpoint(model_dir, config.engine_config(), config.device,
                                         DTYPES[config.resolved_dtype()])
    path = model_dir / "generation_config.json"
    generation = json.loads(path.read_text()) if path.is_file() else default_generation_config() | {
        "max_new_tokens": 2048}
    engine = TalkerEngine(runner)
    if engine.config.is_warm_up(runner.model.device.type):
        warm_up_requests(engine)   # the first request as fast as the hundredth (the shapes are warm already)
    return engine, generation | {"model_dir": str(model_dir)}


def serve(config: TalkerServiceConfig) -> int:
    stop = StopSignal()
    jobs = AdminJobs()
    servicer = TalkerAdminServicer(jobs, config.admin_timeout_s)
    admin_server = side_port(config.grpc_host, config.grpc_port, servicer)
    admin_server.start()
    metrics, metrics_server = TalkerMetrics(), None
    try:
        if config.metrics_port >= 0:   # a taken port ends start-up here, before the model loads
            metrics_server = MetricsServer(metrics.registry, config.metrics_host, config.metrics_port)
        engine, generation = load_engine(config)
        model_dir = generation.pop("model_dir")
        if stop.is_set():
            return 0
        vocab, model = engine.vocab, engine.runner.model
        reader = StartReader(vocab, model.config.hidden_size, int(generation.get("max_new_tokens", 2048)),
                             config.max_text_tokens, max_seq_len=engine.config.max_seq_len)
        voices = VoiceEncoding(model_dir, vocab.model_type, config.model, model.config.hidden_size,
                               model.device, model.dtype, max_pending=config.max_voice_encodings,
                               max_cached=config.max_cached_voices, max_batch_jobs=config.max_voice_batch,
                               max_batch_audio_s=config.max_voice_batch_audio_s,
                               warm_up=engine.config.is_warm_up(model.device.type))
        # a Base model serves clones: SERVING once every encoder shape has run (25 s on an H200),
        # so the first clone requests do not pay 0.4-1 s per new shape; a hung warm-up only warns
        if not voices.wait_until_warm(config.voice_warm_up_timeout_s):
            logger.warning("voice encoders not warmed after %.0f s; serving anyway (first clones may be slow)",
                           config.voice_warm_up_timeout_s)
        server = TalkerServer(config, engine, config.model, reader, admin=jobs, voices=voices)
        stop.attach(server.request_stop)
        metrics.attach(server)
        from checkpoint.text_tokenizer import load_text_tokenizer
        servicer.bind_model(vocab, load_text_tokenizer(model_dir), generation, config.max_text_tokens)
        admin_server.set_serving(True)
        info = {"requests_endpoint": server.endpoint, "grpc_port": admin_server.port, "peer_id": server.peer_id,
                "metrics_port": metrics_server.port if metrics_server else 0,   # 0: off, as the gateway's
                "pid": os.getpid(), "vocoders": config.vocoder_endpoints(),
                # what it was sized to: the launcher sizes the gateway's stream limit from these
                "max_slots": engine.config.max_slots, "max_queued": engine.config.max_queued}
        announce_ready("talker", info, config.ready_file)
        server.run()
        return 0
    finally:
        admin_server.stop()
        if metrics_server is not None:
            metrics_server.stop()
        logger.info("talker stopped")
