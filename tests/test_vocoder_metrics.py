"""The vocoder's Prometheus endpoint (`--metrics-port`), scraped over real HTTP: the busy ratio the
Helm chart's HPA scales vocoders on reads 0 while idle, rises while frames are decoded and falls
back once the window has passed; every counter equals the engine's own.

In-process (the test thread pumps the loop, the endpoint serves from its own thread): decode time
against the steps that really decoded, late chunks kept across a GetStats reset. A real process
(tiny checkpoint, CPU): the port in the ready file, the figures against GetStats and against what
the gateway side received, and the metric name the chart's HPA asks for.
"""
from __future__ import annotations

import time
from concurrent.futures import Future

import numpy as np
import pytest
import yaml

from checkpoint.files import resolve_model_dir
from metrics_support import scrape, wait_scrape
from process_support import VocoderProcess, ready_with_channel
from protos.tts.internal.v1 import admin_pb2, admin_pb2_grpc
from service_common.metrics import MetricsServer
from test_deploy_support import CHART
from test_vocoder_process_support import TalkerStandIn, entry, pump, random_codes, runner_factory  # noqa: F401 (a fixture)
from vocoder_service.server.admin_jobs import AdminJob
from vocoder_service.server.config import VocoderServiceConfig
from vocoder_service.server.loop import VocoderServer
from vocoder_service.server.metrics import ENGINE_COUNTERS

WAIT_S = 30.0
SPF = 1920


@pytest.fixture
def served(runner_factory):
    """make(**config overrides) -> (server, talker stand-in, metrics port); all closed afterwards."""
    made = []

    def make(**overrides):
        from vocoder_service.server.metrics import VocoderMetrics

        settings = dict(bind="tcp://127.0.0.1:*", max_slots=4, first_chunk_frames=2, steady_chunk_frames=4,
                        max_wait_ms=20.0, heartbeat_interval_ms=100, use_graphs=False)
        settings.update(overrides)
        config = VocoderServiceConfig(**settings)
        server = VocoderServer(config, runner_factory(config.max_slots), "tiny")
        metrics = VocoderMetrics()
        metrics.attach(server)
        endpoint = MetricsServer(metrics.registry, "127.0.0.1", 0)
        talker = TalkerStandIn(server.endpoint)
        made.append((server, talker, endpoint))
        pump(server, lambda: len(server.peers) == 1)
        return server, talker, endpoint.port

    yield make
    for server, talker, endpoint in made:
        endpoint.stop()
        talker.close()
        if not server.context.closed:
            server.close()


def pump_for(server: VocoderServer, seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        server.run_once()


def assert_counters_equal_the_engine(values: dict[str, float], server: VocoderServer) -> None:
    for key, (name, _) in ENGINE_COUNTERS.items():
        assert values[f"qwen3_tts_vocoder_{name}_total"] == server.engine.stats[key], name


def test_busy_ratio_is_the_time_in_decoding_steps_and_falls_back_after_the_window(served):
    delay_s = 0.05   # debug_step_delay_s: each step that decoded lasts at least this long
    server, talker, port = served(busy_window_s=1.0, debug_step_delay_s=delay_s)
    pump_for(server, 0.3)   # idle loop turns: engine steps that find nothing are not busy
    idle = scrape(port)
    assert idle["qwen3_tts_vocoder_busy_ratio"] == 0.0 and idle["qwen3_tts_vocoder_busy_seconds_total"] == 0.0
    assert idle["qwen3_tts_vocoder_serving"] == 1.0 and idle["qwen3_tts_vocoder_busy_window_seconds"] == 1.0

    decoding_steps = []
    step = server.engine.step

    def counted_step(**kwargs):
        outs = step(**kwargs)
        if outs:
            decoding_steps.append(len(outs))
        return outs

    server.engine.step = counted_step
    rids = ["a", "b"]
    talker.send_frames([(entry(rid, 0, 10, reply_to=talker.reply_to, final=True), random_codes(i, 10))
                        for i, rid in enumerate(rids)])
    started = time.monotonic()
    pump(server, lambda: all(talker.is_done(rid) for rid in rids))
    wall_s = time.monotonic() - started
    busy = scrape(port)
    assert busy["qwen3_tts_vocoder_busy_ratio"] > 0.0
    assert len(decoding_steps) * delay_s <= busy["qwen3_tts_vocoder_busy_seconds_total"] <= wall_s
    assert_counters_equal_the_engine(busy, server)
    assert busy["qwen3_tts_vocoder_frames_decoded_total"] == 20 and busy["qwen3_tts_vocoder_requests_completed_total"] == 2
    chunks = sum(len(talker.received[rid].chunks) for rid in rids)
    assert busy["qwen3_tts_vocoder_chunks_emitted_total"] == chunks
    assert busy["qwen3_tts_vocoder_audio_seconds_total"] == pytest.approx(20 * SPF / 24000)
    assert busy["qwen3_tts_vocoder_open_streams"] == 0 and busy["qwen3_tts_vocoder_max_slots"] == 4

    # a window (1 s) later with nothing to decode: back to 0, the counter keeps what it counted
    after = wait_scrape(port, lambda v: v["qwen3_tts_vocoder_busy_ratio"] == 0.0, timeout_s=10.0,
                        between=lambda: pump_for(server, 0.1))
    assert after["qwen3_tts_vocoder_busy_seconds_total"] == busy["qwen3_tts_vocoder_busy_seconds_total"]


def test_open_streams_and_slots_are_those_held_now(served):
    server, talker, port = served()
    talker.send_frames([(entry(rid, 0, 2, reply_to=talker.reply_to), random_codes(i, 2))
                        for i, rid in enumerate(["x", "y", "z"])])
    pump(server, lambda: server.engine.num_active == 3 and server.latest_load.num_slots_used == 3)
    values = scrape(port)
    assert values["qwen3_tts_vocoder_open_streams"] == 3 and values["qwen3_tts_vocoder_slots_used"] == 3
    assert values["qwen3_tts_vocoder_requests_started_total"] == 3
    talker.send_frames([(entry(rid, 1, 0, final=True), np.zeros((0, 16))) for rid in ["x", "y", "z"]])
    pump(server, lambda: server.engine.num_active == 0 and server.latest_load.num_slots_used == 0)
    values = scrape(port)
    assert values["qwen3_tts_vocoder_open_streams"] == 0 and values["qwen3_tts_vocoder_slots_used"] == 0


def test_late_chunks_count_for_the_process_life_across_a_stats_reset(served):
    server, talker, port = served()
    codes = random_codes(7, 6)
    # 2 frames (160 ms of audio) play out while the next 4 are held back: their chunk comes late
    talker.send_frames([(entry("slow", 0, 2, reply_to=talker.reply_to), codes[:2])])
    pump(server, lambda: talker.is_done("slow") or bool(talker.received.get("slow")))
    pump_for(server, 0.5)
    talker.send_frames([(entry("slow", 1, 4, final=True), codes[2:])])
    pump(server, lambda: talker.is_done("slow"))
    engine_late = server.engine.deadline_stats["late_chunks"]
    assert engine_late >= 1
    before = scrape(port)
    assert before["qwen3_tts_vocoder_late_chunks_total"] == engine_late
    assert before["qwen3_tts_vocoder_max_chunk_lateness_seconds"] >= 0.25

    job = AdminJob("stats", admin_pb2.GetStatsRequest(reset=True), Future(), time.monotonic() + WAIT_S)
    server.run_stats_job(job)
    assert job.future.result(timeout=0).deadlines.num_late_chunks == engine_late
    assert server.engine.deadline_stats["late_chunks"] == 0   # GetStats' window starts again ...
    after = scrape(port)                                      # ... the counter does not go back
    assert after["qwen3_tts_vocoder_late_chunks_total"] == engine_late
    assert after["qwen3_tts_vocoder_max_chunk_lateness_seconds"] == before["qwen3_tts_vocoder_max_chunk_lateness_seconds"]


# ---- a real vocoder process --------------------------------------------------------------------

@pytest.fixture(scope="module")
def vocoder(tmp_path_factory):
    resolve_model_dir("tiny")
    proc = VocoderProcess(tmp_path_factory.mktemp("vocoder-metrics"), [
        "--model", "tiny", "--device", "cpu", "--cpu-threads", "1", "--bind", "tcp://127.0.0.1:*",
        "--grpc-host", "127.0.0.1", "--grpc-port", "0", "--metrics-port", "0", "--busy-window-s", "2",
        "--max-slots", "4", "--first-chunk-frames", "2", "--steady-chunk-frames", "4", "--max-wait-ms", "50",
        "--heartbeat-interval-ms", "200"])
    with ready_with_channel(proc, WAIT_S * 3):
        yield proc


def test_a_vocoder_process_exports_what_its_engine_counts(vocoder):
    port = vocoder.info["metrics_port"]
    assert port > 0
    idle = scrape(port)
    assert idle["qwen3_tts_vocoder_busy_ratio"] == 0.0 and idle["qwen3_tts_vocoder_serving"] == 1.0
    # the name the chart's HPA reads is one this process exports
    hpa_metric = yaml.safe_load((CHART / "values.yaml").read_text())["vocoder"]["autoscaling"]["metric"]["name"]
    assert hpa_metric in idle

    talker = TalkerStandIn(vocoder.info["codes_endpoint"])
    try:
        rids = [f"req-{i}" for i in range(3)]
        for seq in range(3):   # three "talker steps" of 4 frames per request
            talker.send_frames([(entry(rid, seq, 4, reply_to=talker.reply_to if seq == 0 else "", final=seq == 2),
                                 random_codes(10 * i + seq, 4)) for i, rid in enumerate(rids)])
        got = talker.collect(rids, WAIT_S)
    finally:
        talker.close()
    assert all(got[rid].error is None for rid in rids)
    # the engine counts a stream completed when its final chunk is decoded; the server counts its audio
    # once that chunk is sent, a moment later on the same loop: wait for both (a scrape between them
    # read 1.92 of the 2.88 s)
    busy = wait_scrape(port, lambda v: v["qwen3_tts_vocoder_requests_completed_total"] == 3 and
                       v["qwen3_tts_vocoder_audio_seconds_total"] == pytest.approx(36 * SPF / 24000), timeout_s=WAIT_S)
    assert busy["qwen3_tts_vocoder_busy_ratio"] > 0.0 and busy["qwen3_tts_vocoder_busy_seconds_total"] > 0.0
    stats = admin_pb2_grpc.VocoderAdminStub(vocoder.channel).GetStats(admin_pb2.GetStatsRequest(), timeout=WAIT_S)
    assert busy["qwen3_tts_vocoder_requests_started_total"] == stats.requests.num_started == 3
    assert busy["qwen3_tts_vocoder_requests_completed_total"] == stats.requests.num_finished
    assert busy["qwen3_tts_vocoder_requests_refused_total"] == stats.requests.num_refused == 0
    assert busy["qwen3_tts_vocoder_frames_decoded_total"] == stats.num_frames_decoded == 36
    assert busy["qwen3_tts_vocoder_late_chunks_total"] == stats.deadlines.num_late_chunks
    assert busy["qwen3_tts_vocoder_audio_seconds_total"] == pytest.approx(stats.audio_s_emitted)
    assert busy["qwen3_tts_vocoder_chunks_emitted_total"] == sum(len(got[rid].chunks) for rid in rids)
    assert busy["qwen3_tts_vocoder_max_slots"] == stats.load.num_slots_total == 4
    # two seconds (--busy-window-s) after the last decode it reads idle again
    wait_scrape(port, lambda v: v["qwen3_tts_vocoder_busy_ratio"] == 0.0, timeout_s=WAIT_S)
