"""Chunks that are not audio (NaN/inf samples, samples at or past full scale): found, replaced,
counted and logged on every path a chunk takes (issue #39), never sent as they are.

Vocoder: the real runner (eager, and its graph table emulated on CPU) with a step body that
poisons one row, through the engine; the outbox's PcmBatch and the gateway's split of it; GetStats.
Gateway: the stream encoder (PCM16, float32, mu-law, resampled), the unary file writer, and a
session's chunk path into the Prometheus counters with a rate-limited warning.
"""
from __future__ import annotations

import io
import logging
from types import SimpleNamespace

import numpy as np
import pytest
import soundfile
import torch

from checkpoint.files import resolve_model_dir
from gateway.audio_encoding import StreamEncoder, whole_file
from gateway.metrics import GatewayMetrics
from gateway.session import Session, vocoder_faults
from protos import wire
from protos.pcm_split import split_pcm
from protos.tts.v1 import config_pb2
from service_common.audio_samples import FaultLog, SampleFaults, repaired
from test_vocoder_process_support import one_cpu_thread, random_codes
from vocoder_service.codec import Code2Wav
from vocoder_service.engine.chunk_policy import ChunkPolicy
from vocoder_service.engine.config import VocoderEngineConfig
from vocoder_service.engine.engine import VocoderEngine
from vocoder_service.runtime.runner import DecoderRunner
from vocoder_service.server.outbox import Outbox
from vocoder_service.server.stats import ServerStats, vocoder_stats

E = config_pb2
NAN, INF = float("nan"), float("inf")
# sample index -> value written into the poisoned row: two non-finite, two at or past full scale
POISON = {5: NAN, 6: -INF, 7: 1.5, 8: -1.0}


def poisoned_chunk() -> np.ndarray:
    pcm = np.linspace(-0.5, 0.5, 64, dtype=np.float32)
    for index, value in POISON.items():
        pcm[index] = value
    return pcm


# ---- the shared check ----------------------------------------------------------------------------
def test_repaired_replaces_nonfinite_by_zero_and_counts_both_kinds():
    pcm = poisoned_chunk()
    out, faults = repaired(pcm)
    assert faults == SampleFaults(num_nonfinite=2, num_clipped=2)
    assert np.isfinite(out).all() and out[5] == 0 and out[6] == 0 and out[7] == 1.5 and out[8] == -1.0
    assert out is pcm   # writable: fixed in place


def test_repaired_copies_a_read_only_chunk_and_passes_clean_ones_through():
    pcm = poisoned_chunk()
    pcm.flags.writeable = False
    out, faults = repaired(pcm)
    assert faults.num_nonfinite == 2 and out is not pcm and np.isfinite(out).all() and np.isnan(pcm[5])
    clean = np.full(16, 0.999, np.float32)
    assert repaired(clean) == (clean, SampleFaults()) and repaired(np.zeros(0, np.float32))[1] == SampleFaults()


def test_fault_log_warns_at_most_once_per_interval_and_says_how_many_it_held_back(caplog):
    now = [100.0]
    log = FaultLog(logging.getLogger("test.faults"), "vocoder", interval_s=10.0, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="test.faults"):
        for seq in range(5):
            log.chunk("req-a", seq, SampleFaults(1, 0), 1920)
        now[0] += 10.0
        log.chunk("req-b", 7, SampleFaults(0, 3), 1920)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert "request req-a" in lines[0] and "chunk 0" in lines[0] and "1 non-finite" in lines[0]
    assert "request req-b" in lines[1] and "3 at or past full scale" in lines[1] and "4 more faulty chunks" in lines[1]


# ---- vocoder: runner + engine --------------------------------------------------------------------
@pytest.fixture(scope="module")
def model():
    with one_cpu_thread():
        yield Code2Wav.from_pretrained(resolve_model_dir("tiny"), "cpu", torch.float32)


def poisoning(step):
    """The decoder's step at half scale (the tiny random decoder clips by itself), row 0 poisoned."""
    def body(codes, slots, lengths):
        out = step(codes, slots, lengths).float() * 0.5
        for index, value in POISON.items():
            out[0, index] = value
        return out
    return body


@pytest.mark.parametrize("path", ["eager", "graphs"])
def test_engine_sends_poisoned_chunks_finite_counts_them_and_logs_the_request(model, path, monkeypatch, caplog):
    with one_cpu_thread():
        runner = DecoderRunner(model, max_slots=4)
        body = poisoning(runner.decoder.step_unchecked)
        if path == "graphs":   # the graph table's padded static shapes, emulated: the device counts run there
            runner.capture_graphs([1, 2, 4], [1, 2], 2**30, emulate=True, body=body)
        else:
            monkeypatch.setattr(runner.decoder, "step_unchecked", body)
        engine = VocoderEngine(runner, VocoderEngineConfig(max_slots=4, chunk=ChunkPolicy(2, 2, 200.0, 2, 0)))
        for rid in ("bad", "good"):   # opened in this order: "bad" is row 0 of the batch
            engine.open(rid)
            engine.add_frames(rid, 0, random_codes(1, 2), is_final=True)
        with caplog.at_level(logging.WARNING, logger="vocoder_service.engine.engine"):
            outs = {out.request_id: out for out in engine.step()}
    assert runner.stats.num_graph_steps == (1 if path == "graphs" else 0)
    bad, good = outs["bad"], outs["good"]
    assert np.isfinite(bad.pcm).all() and bad.pcm[5] == 0 and bad.pcm[6] == 0 and bad.pcm[7] == 1.5
    assert bad.faults == SampleFaults(2, 2) and not good.faults and np.abs(good.pcm).max() < 1.0
    stats = engine.stats
    assert (stats["nonfinite_chunks"], stats["nonfinite_samples"], stats["clipped_chunks"], stats["clipped_samples"]) \
        == (1, 2, 1, 2)
    [warning] = [r.getMessage() for r in caplog.records]
    assert "request bad" in warning and "2 non-finite" in warning

    # GetStats carries the engine's counters
    proto = vocoder_stats(peer_id="v", model="tiny", uptime_s=1.0, engine=engine, runner_stats=runner.stats,
                          server_stats=ServerStats(), talkers=[])
    assert (proto.num_nonfinite_chunks, proto.num_nonfinite_samples, proto.num_clipped_chunks,
            proto.num_clipped_samples) == (1, 2, 1, 2)

    # the PCM message says so, and the gateway's split of it hands the counts to the request
    sent = []
    outbox = Outbox(None, SimpleNamespace(send=lambda reply_to, frames: sent.append(wire.decode(frames))), "v", "tiny",
                    24000, 1000)
    outbox.pcm_to_gateway("tcp://gw", [bad, good], [None, None])
    [(_, header, arrays)] = sent
    parts = {p.request_id: p for p in split_pcm(header, arrays)}
    assert (parts["bad"].num_nonfinite_samples, parts["bad"].num_clipped_samples) == (2, 2)
    assert (parts["good"].num_nonfinite_samples, parts["good"].num_clipped_samples) == (0, 0)
    assert vocoder_faults(parts["bad"]) == SampleFaults(2, 2) and vocoder_faults(parts["good"]) == SampleFaults()
    assert np.isfinite(arrays.pcm).all()


# ---- gateway: encoding ---------------------------------------------------------------------------
def test_pcm16_encodes_nonfinite_as_zero_and_clamps_full_scale():
    encoded = StreamEncoder(E.AUDIO_ENCODING_PCM16, 24000, 24000).encode(poisoned_chunk())
    samples = np.frombuffer(encoded.audio, "<i2")
    assert encoded.faults == SampleFaults(2, 2)
    assert samples[5] == 0 and samples[6] == 0 and samples[7] == 32767 and samples[8] == -32767


def test_float32_keeps_samples_past_full_scale_but_never_sends_nonfinite():
    encoded = StreamEncoder(E.AUDIO_ENCODING_FLOAT32, 24000, 24000).encode(poisoned_chunk())
    samples = np.frombuffer(encoded.audio, "<f4")
    assert encoded.faults == SampleFaults(2, 2) and np.isfinite(samples).all() and samples[7] == 1.5


def test_a_nan_never_reaches_the_resampler_state():
    """Resampled, a poisoned stream encodes exactly as the same stream with those samples at 0."""
    poisoned = np.frombuffer(poisoned_chunk().tobytes() * 30, np.float32)   # read-only, as a received frame
    zeroed = np.nan_to_num(poisoned, nan=0.0, posinf=0.0, neginf=0.0)
    steady = np.full(1920, 0.25, np.float32)
    outputs = []
    for first in (poisoned, zeroed):
        encoder = StreamEncoder(E.AUDIO_ENCODING_PCM16, 24000, 16000)
        outputs.append((encoder.encode(first), encoder.encode(steady, is_last=True)))
    (first, later), (first_zeroed, later_zeroed) = outputs
    assert first.faults.num_nonfinite == 60 and later.faults == SampleFaults()
    assert first.audio == first_zeroed.audio and later.audio == later_zeroed.audio and len(later.audio) > 0


@pytest.mark.parametrize("encoding", [E.AUDIO_ENCODING_MULAW, E.AUDIO_ENCODING_WAV])
def test_integer_encodings_clamp_instead_of_wrapping(encoding):
    pcm = np.full(480, 1.2, np.float32)
    encoded = StreamEncoder(encoding, 24000, 24000).encode(pcm, is_last=True)
    assert encoded.faults == SampleFaults(0, 480)
    if encoding == E.AUDIO_ENCODING_MULAW:
        decoded, _ = soundfile.read(io.BytesIO(encoded.audio), format="RAW", subtype="ULAW", samplerate=24000,
                                    channels=1)
        assert decoded.min() > 0.9   # 1.2 wrapped around would come back negative


def test_whole_file_clamps_instead_of_wrapping():
    decoded, _ = soundfile.read(io.BytesIO(whole_file(np.full(480, 1.2, np.float32), 24000, E.AUDIO_ENCODING_WAV)))
    assert decoded.min() > 0.99


# ---- gateway: a session's chunks into /metrics ---------------------------------------------------
def vocoder_sent(pcm: np.ndarray) -> np.ndarray:
    """`pcm` as a vocoder sends it: NaN/inf already 0, read-only as a received frame's view."""
    pcm = np.nan_to_num(pcm, nan=0.0, posinf=0.0, neginf=0.0)
    pcm.flags.writeable = False
    return pcm


def pcm16_session(request_id: str) -> tuple[Session, GatewayMetrics]:
    """A session at 24 kHz PCM16 whose chunk faults go to a fresh GatewayMetrics."""
    metrics = GatewayMetrics()
    backend = SimpleNamespace(open_mailbox=lambda request_id, talker: SimpleNamespace())
    resolved = SimpleNamespace(encoding=E.AUDIO_ENCODING_PCM16, sample_rate_hz=24000, speed=1.0)
    return Session(backend, None, resolved, SimpleNamespace(peer_id="t"), 1000, 0, request_id, 1.0, 1.0,
                   on_audio_faults=metrics.count_audio_faults), metrics


def test_encoder_takes_the_vocoders_faults_without_looking_at_the_samples_again(monkeypatch):
    def no_second_check(pcm):
        raise AssertionError("the gateway checked a chunk the vocoder had checked")
    monkeypatch.setattr("gateway.audio_encoding.repaired", no_second_check)
    monkeypatch.setattr("gateway.audio_encoding.count_faults", no_second_check)
    for encoding in (E.AUDIO_ENCODING_PCM16, E.AUDIO_ENCODING_MULAW):
        encoded = StreamEncoder(encoding, 24000, 24000).encode(vocoder_sent(poisoned_chunk()), is_last=True,
                                                               faults=SampleFaults(2, 2))
        assert encoded.faults == SampleFaults(2, 2)
        if encoding == E.AUDIO_ENCODING_PCM16:
            samples = np.frombuffer(encoded.audio, "<i2")
            assert (samples[5], samples[6], samples[7], samples[8]) == (0, 0, 32767, -32767)
        else:   # 1.5 clamped, not wrapped around by libsndfile's mu-law
            decoded, _ = soundfile.read(io.BytesIO(encoded.audio), format="RAW", subtype="ULAW", samplerate=24000,
                                        channels=1)
            assert decoded[5] == 0 and decoded[7] > 0.9 and decoded[8] < -0.9


def test_vocoder_faults_come_from_the_pcm_part_and_only_from_it():
    assert vocoder_faults(SimpleNamespace(num_nonfinite_samples=3, num_clipped_samples=1)) == SampleFaults(3, 1)
    assert vocoder_faults(SimpleNamespace(seq=0)) is None   # no check came with it: the encoder checks


def test_session_counts_its_chunks_faults_in_the_metrics_and_logs_the_request(caplog):
    session, metrics = pcm16_session("req-7")
    with caplog.at_level(logging.WARNING, logger="gateway.metrics"):
        # the vocoder replaced 2 NaN/inf by 0 and counted 2 samples at or past full scale (the PcmBatch says so)
        chunk = session._audio_response(vocoder_sent(poisoned_chunk()), False, seq=4,
                                        upstream_faults=SampleFaults(2, 2)).audio
        session._audio_response(np.full(64, 0.1, np.float32), False, seq=5, upstream_faults=SampleFaults())
    # NaN/inf as the vocoder sent them (0), 1.5 clamped to full scale, everything else as it was
    expected = np.round(np.clip(vocoder_sent(poisoned_chunk()), -1.0, 1.0) * 32767.0).astype("<i2")
    assert expected[5] == expected[6] == 0 and expected[7] == 32767 and expected[8] == -32767
    assert np.array_equal(np.frombuffer(chunk.audio, "<i2"), expected)
    value = metrics.registry.get_sample_value
    # counted once: the vocoder's counts pass through, the gateway adds none of its own
    assert value("tts_audio_nonfinite_chunks_total") == 1 and value("tts_audio_nonfinite_samples_total") == 2
    assert value("tts_audio_clipped_chunks_total") == 1 and value("tts_audio_clipped_samples_total") == 2
    [warning] = [r.getMessage() for r in caplog.records]
    assert "request req-7" in warning and "chunk 4" in warning and "2 non-finite" in warning


def test_session_checks_a_chunk_that_came_without_the_vocoders_counts():
    session, metrics = pcm16_session("req-8")
    chunk = session._audio_response(poisoned_chunk(), False, seq=0).audio
    samples = np.frombuffer(chunk.audio, "<i2")
    assert (samples[5], samples[6], samples[7], samples[8]) == (0, 0, 32767, -32767)
    value = metrics.registry.get_sample_value
    assert value("tts_audio_nonfinite_samples_total") == 2 and value("tts_audio_clipped_samples_total") == 2
