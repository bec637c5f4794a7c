"""The talker's Prometheus endpoint (`--metrics-port`) on a real process (tiny checkpoint, CPU),
scraped over real HTTP: the busy ratio reads 0 while idle, rises while a generation runs (each
engine step slowed by --debug-step-delay-s, so the busy time has a floor) and falls back once the
window has passed; slots and requests are those held at that moment; the counters equal the
engine's (admin GetStats). The generation is an admin GenerateCodes call, which needs no vocoder:
the talker lists one where nothing listens."""
from __future__ import annotations

import threading

import pytest

from checkpoint.files import resolve_model_dir
from metrics_support import scrape, wait_scrape
from process_support import TalkerProcess, dead_port, ready_with_channel
from protos.tts.internal.v1 import admin_pb2, admin_pb2_grpc
from protos.tts.v1 import config_pb2

WAIT_S = 60.0
STEP_DELAY_S = 0.02
NUM_FRAMES = 60


@pytest.fixture(scope="module")
def talker(tmp_path_factory):
    resolve_model_dir("tiny")
    with dead_port() as unused_port:
        proc = TalkerProcess(tmp_path_factory.mktemp("talker-metrics"), [
            "--model", "tiny", "--device", "cpu", "--cpu-threads", "1", "--bind", "tcp://127.0.0.1:*",
            "--vocoders", f"tcp://127.0.0.1:{unused_port}", "--grpc-host", "127.0.0.1", "--grpc-port", "0",
            "--metrics-port", "0", "--busy-window-s", "2", "--max-slots", "2", "--max-queued", "3",
            "--max-seq-len", "256", "--debug-step-delay-s", str(STEP_DELAY_S)])
        with ready_with_channel(proc, WAIT_S * 2):
            yield proc


def generate(channel, num_frames: int) -> list:
    config = config_pb2.SynthesisConfig(speaker=config_pb2.SpeakerVoice(name="vivian"), language="english",
                                        text_mode=config_pb2.TEXT_MODE_STREAMING,
                                        sampling=config_pb2.SamplingParams(seed=3, min_frames=num_frames,
                                                                           max_frames=num_frames))
    stub = admin_pb2_grpc.TalkerAdminStub(channel)
    return list(stub.GenerateCodes(admin_pb2.GenerateCodesRequest(text="Hello there.", config=config), timeout=WAIT_S))


def test_a_talker_process_exports_its_busy_time_slots_and_counters(talker):
    port = talker.info["metrics_port"]
    assert port > 0
    idle = scrape(port)
    assert idle["qwen3_tts_talker_busy_ratio"] == 0.0 and idle["qwen3_tts_talker_busy_seconds_total"] == 0.0
    assert idle["qwen3_tts_talker_serving"] == 1.0 and idle["qwen3_tts_talker_slots_used"] == 0
    assert idle["qwen3_tts_talker_max_slots"] == 2 and idle["qwen3_tts_talker_max_queued"] == 3

    replies: list = []
    worker = threading.Thread(target=lambda: replies.extend(generate(talker.channel, NUM_FRAMES)))
    worker.start()
    try:   # NUM_FRAMES steps of at least STEP_DELAY_S each: long enough to be seen running
        running = wait_scrape(port, lambda v: v["qwen3_tts_talker_slots_used"] == 1, timeout_s=WAIT_S)
        assert running["qwen3_tts_talker_requests_active"] == 1 and running["qwen3_tts_talker_requests_queued"] == 0
        assert running["qwen3_tts_talker_busy_ratio"] > 0.0
    finally:
        worker.join(timeout=WAIT_S)
    assert not worker.is_alive() and replies and replies[-1].is_final
    done = wait_scrape(port, lambda v: v["qwen3_tts_talker_requests_finished_total"] == 1, timeout_s=WAIT_S)
    assert done["qwen3_tts_talker_slots_used"] == 0 and done["qwen3_tts_talker_busy_ratio"] > 0.0
    stats = admin_pb2_grpc.TalkerAdminStub(talker.channel).GetStats(admin_pb2.GetStatsRequest(), timeout=WAIT_S)
    assert done["qwen3_tts_talker_frames_generated_total"] == stats.num_frames_generated == NUM_FRAMES
    assert done["qwen3_tts_talker_requests_started_total"] == stats.requests.num_started == 1
    assert done["qwen3_tts_talker_requests_refused_total"] == stats.requests.num_refused == 0
    assert done["qwen3_tts_talker_decode_steps_total"] >= NUM_FRAMES - 1
    # a lone request started at once: nothing held it (the counters from the engine: test_talker_prefill_gather.py)
    holds = stats.admission_holds
    assert done["qwen3_tts_talker_gather_holds_total"] == holds.num_gather_holds == 0
    assert done["qwen3_tts_talker_cadence_holds_total"] == holds.num_cadence_holds == 0
    assert done["qwen3_tts_talker_deadline_holds_total"] == holds.num_deadline_holds == 0
    # every step that ran slept STEP_DELAY_S inside the busy interval
    assert done["qwen3_tts_talker_busy_seconds_total"] >= done["qwen3_tts_talker_decode_steps_total"] * STEP_DELAY_S
    # two seconds (--busy-window-s) later with nothing to run it reads idle again, the total kept
    after = wait_scrape(port, lambda v: v["qwen3_tts_talker_busy_ratio"] == 0.0, timeout_s=WAIT_S)
    assert after["qwen3_tts_talker_busy_seconds_total"] == done["qwen3_tts_talker_busy_seconds_total"]
