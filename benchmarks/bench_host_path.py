"""Host time per step on the data plane, CPU only: talker emit, vocoder intake, PCM send, gateway split.

    python benchmarks/bench_host_path.py --out /tmp/host_path.json
    python benchmarks/bench_host_path.py --smoke --out /tmp/host_path_smoke.json

Real components on real ZeroMQ sockets over loopback TCP (the deployed transport), no model:
- talker emit: `Emitter.emit` of one step's outputs (one frame per stream) -> FRAMES to the vocoder;
- vocoder intake: receive that message and `VocoderServer.dispatch` it (decode, checks, engine);
- vocoder PCM send: `VocoderServer.emit` of one decode step's chunks (`--chunk-frames` per stream),
  the decode itself a stub returning a constant (not timed);
- gateway receive: read and decode every PCM message of that step and split it into per-request
  chunks (what `gateway.backend` hands to each request's mailbox).

Only public entry points are driven, so the same file times the old wire format on an older
commit (`--commit` labels a tree without .git). Each stage is timed with perf_counter per step
over many steps after a warm-up; medians (and p90) are reported.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import zmq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.commit import git_commit as read_commit  # noqa: E402

from protos import wire  # noqa: E402
from talker_service.engine import FramesOut  # noqa: E402
from talker_service.server.emit import Emitter  # noqa: E402
from talker_service.server.gateways import GatewayPeers  # noqa: E402
from talker_service.server.outbox import Outbox as TalkerOutbox  # noqa: E402
from talker_service.server.routes import Route, RouteTable  # noqa: E402
from talker_service.server.vocoders import VocoderLink  # noqa: E402
from vocoder_service.server.config import VocoderServiceConfig  # noqa: E402
from vocoder_service.server.loop import VocoderServer  # noqa: E402

try:   # the array wire format splits one PCM message into per-request chunks; the old one had one each
    from protos.pcm_split import split_pcm
except ImportError:
    split_pcm = None

WAIT_S = 10.0
SAMPLES_PER_FRAME = 1920


class StubRunner:
    """What VocoderServer needs of a runner; decode returns fresh, written memory (as the copy of a
    graph's output is: untouched calloc pages would make the first reader pay the page faults)."""

    samples_per_frame = SAMPLES_PER_FRAME
    sample_rate_hz = 24000
    codebook_size = 2048
    last_step_is_graph = True

    def __init__(self) -> None:
        self.stats = SimpleNamespace(step_time=SimpleNamespace(recent_mean_ms=lambda: 0.0))

    def reset(self, slots) -> None:
        pass

    def decode(self, codes, slots, lengths) -> np.ndarray:
        return np.full((codes.shape[0], codes.shape[2] * SAMPLES_PER_FRAME), 0.25, np.float32)   # [bs, t*spf]


class StubTalkerEngine:
    def fail(self, request_id, code, message):
        raise RuntimeError(f"{request_id}: {code} {message}")

    def abort(self, request_id) -> None:
        pass


class SendClock:
    """Wall time spent inside ZeroMQ sends, to tell a stage's own work from the socket call (on a
    loaded 2-core box the socket call also waits for ZeroMQ's I/O threads moving megabytes of PCM)."""

    def __init__(self) -> None:
        self.spent_s = 0.0

    def wrap(self, send):
        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return send(*args, **kwargs)
            finally:
                self.spent_s += time.perf_counter() - started
        return timed

    def take(self) -> float:
        spent, self.spent_s = self.spent_s, 0.0
        return spent


class TimedSocket:
    """A socket whose send_multipart is timed by a SendClock; everything else passes through."""

    def __init__(self, socket: zmq.Socket, clock: SendClock) -> None:
        self._socket = socket
        self.send_multipart = clock.wrap(socket.send_multipart)

    def __getattr__(self, name):
        return getattr(self._socket, name)


def git_commit() -> str:
    return read_commit(short=True)


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


class Harness:
    """One talker link, one vocoder server, one gateway PULL, `batch` live streams."""

    def __init__(self, batch: int, chunk_frames: int) -> None:
        self.batch, self.chunk_frames = batch, chunk_frames
        self.context = zmq.Context()
        self.gateway = self.context.socket(zmq.PULL)
        self.gateway.setsockopt(zmq.RCVHWM, 100000)
        reply_to = f"tcp://127.0.0.1:{self.gateway.bind_to_random_port('tcp://127.0.0.1')}"
        config = VocoderServiceConfig(bind="tcp://127.0.0.1:*", max_slots=batch, first_chunk_frames=chunk_frames,
                                      steady_chunk_frames=chunk_frames, max_wait_ms=1e6, use_graphs=False,
                                      pcm_snd_hwm=100000, router_rcv_hwm=100000)
        self.server = VocoderServer(config, StubRunner(), "stub")
        dealer = self.context.socket(zmq.DEALER)
        dealer.setsockopt(zmq.SNDHWM, 100000)
        dealer.connect(self.server.endpoint)
        self.talker_sends, self.pcm_sends = SendClock(), SendClock()
        self.link = VocoderLink(self.server.endpoint, TimedSocket(dealer, self.talker_sends), peer_id="vocoder")
        self.server.outbox.pushes.send = self.pcm_sends.wrap(self.server.outbox.pushes.send)
        self.routes = RouteTable(StubTalkerEngine(), TalkerOutbox(None, "talker-bench"), GatewayPeers(60.0))
        self.emitter = Emitter(self.routes, TalkerOutbox(None, "talker-bench"))
        self.ids = [f"req-{i:04d}-{'x' * 24}" for i in range(batch)]   # uuid-like length
        for rid in self.ids:
            self.routes.add(Route(rid, gateway=None, reply_to=reply_to, vocoder=self.link))
        self.codes = np.random.default_rng(0).integers(0, 2048, (batch, 1, 16))   # one frame per step, int64
        self.seq = 0

    def close(self) -> None:
        self.server.close()
        self.link.socket.close(linger=0)
        self.gateway.close(linger=0)
        self.context.term()

    def talker_step(self) -> tuple[float, float]:
        """(emit wall time, of which inside the socket send)."""
        outs = [FramesOut(rid, self.seq, self.codes[i], self.seq) for i, rid in enumerate(self.ids)]
        self.seq += 1
        self.talker_sends.take()
        started = time.perf_counter()
        self.emitter.emit(outs)
        return time.perf_counter() - started, self.talker_sends.take()

    def vocoder_intake(self) -> float:
        router = self.server.recv_from_talkers
        if not router.poll(int(WAIT_S * 1e3)):
            raise TimeoutError("no FRAMES message reached the vocoder")
        started = time.perf_counter()
        frames = router.recv_multipart(flags=zmq.NOBLOCK, copy=False)
        self.server.dispatch(frames[0].bytes, frames[1:])
        return time.perf_counter() - started

    def vocoder_pcm(self) -> tuple[float, float, int]:
        """(PCM send wall time, of which inside socket sends, chunks sent)."""
        outs = self.server.engine.step()   # stub decode, not timed
        self.pcm_sends.take()
        started = time.perf_counter()
        self.server.emit(outs)
        return time.perf_counter() - started, self.pcm_sends.take(), len(outs)

    def gateway_receive(self, num_chunks: int) -> float:
        """Work time to read, decode and split the step's PCM (waits for arrival are not counted)."""
        spent, got, deadline = 0.0, 0, time.monotonic() + WAIT_S
        while got < num_chunks:
            if time.monotonic() > deadline or not self.gateway.poll(int(WAIT_S * 1e3)):
                raise TimeoutError(f"gateway got {got} of {num_chunks} chunks")
            started = time.perf_counter()
            while True:
                try:
                    frames = self.gateway.recv_multipart(flags=zmq.NOBLOCK, copy=False)
                except zmq.Again:
                    break
                msg_type, header, arrays = wire.decode(frames)
                if msg_type != wire.MessageType.PCM:
                    raise RuntimeError(f"{msg_type.name} on the audio socket: {header}")
                got += len(split_pcm(header, arrays)) if split_pcm is not None else 1
            spent += time.perf_counter() - started
        return spent


def request_id_cost_us(batch: int, reps: int = 300) -> dict | None:
    """What naming PCM chunks by request id (a repeated string in the protobuf header) costs per
    chunk: build + serialize on the vocoder, parse + read on the gateway. None on the old format."""
    try:
        from protos.tts.internal.v1.vocoder_pb2 import PcmBatch
    except ImportError:
        return None
    ids = [f"req-{i:04d}-{'x' * 24}" for i in range(batch)]
    build, parse = [], []
    for _ in range(reps):
        started = time.perf_counter()
        raw = PcmBatch(sample_rate_hz=24000, request_ids=ids).SerializeToString()
        built = time.perf_counter()
        names = list(PcmBatch.FromString(raw).request_ids)
        parse.append(time.perf_counter() - built)
        build.append(built - started)
    assert names == ids
    return {"build_us_per_chunk": statistics.median(build) * 1e6 / batch,
            "parse_us_per_chunk": statistics.median(parse) * 1e6 / batch}


def stats_ms(samples: list[float]) -> dict:
    ms = sorted(s * 1e3 for s in samples)
    return {"median_ms": statistics.median(ms), "p90_ms": ms[int(0.9 * (len(ms) - 1))], "n": len(ms)}


def run(batch: int, chunk_frames: int, steps: int, warmup: int) -> dict:
    h = Harness(batch, chunk_frames)
    times = {"talker_emit": [], "talker_emit_in_socket": [], "vocoder_intake": [], "vocoder_pcm_send": [],
             "vocoder_pcm_send_in_socket": [], "gateway_pcm_receive": []}
    try:
        for index in range(warmup + steps):
            for _ in range(chunk_frames):   # one vocoder decode step per `chunk_frames` talker steps
                emit_s, emit_socket_s = h.talker_step()
                intake_s = h.vocoder_intake()
                if index >= warmup:
                    times["talker_emit"].append(emit_s)
                    times["talker_emit_in_socket"].append(emit_socket_s)
                    times["vocoder_intake"].append(intake_s)
            send_s, send_socket_s, num_chunks = h.vocoder_pcm()
            if num_chunks != batch:
                raise RuntimeError(f"decode step emitted {num_chunks} chunks, expected {batch}")
            receive_s = h.gateway_receive(num_chunks)
            if index >= warmup:
                times["vocoder_pcm_send"].append(send_s)
                times["vocoder_pcm_send_in_socket"].append(send_socket_s)
                times["gateway_pcm_receive"].append(receive_s)
    finally:
        h.close()
    return {"batch": batch, "chunk_frames": chunk_frames, "stages": {k: stats_ms(v) for k, v in times.items()},
            "pcm_request_ids": request_id_cost_us(batch)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="JSON results path")
    p.add_argument("--batches", default="1,64,256")
    p.add_argument("--chunk-frames", type=int, default=4, help="frames per PCM chunk (vocoder steady chunk)")
    p.add_argument("--steps", type=int, default=100, help="timed vocoder decode steps per batch size")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--label", default="", help="e.g. before / after")
    p.add_argument("--commit", default="", help="commit of the code under test (default: git HEAD)")
    p.add_argument("--smoke", action="store_true", help="few steps (checks the script)")
    args = p.parse_args(argv)
    if args.smoke:
        args.steps, args.warmup = 3, 1
    result = {"benchmark": "host_path", "label": args.label, "commit": args.commit or git_commit(),
              "cpu": cpu_name(), "python": platform.python_version(), "pyzmq": zmq.__version__,
              "libzmq": zmq.zmq_version(), "config": {"chunk_frames": args.chunk_frames, "steps": args.steps,
                                                      "warmup": args.warmup, "transport": "tcp loopback",
                                                      "frames_per_talker_step": 1},
              "runs": []}
    print(f"{'batch':>5} | {'talker emit (socket)':>20} | {'vocoder intake':>14} | {'PCM send (socket)':>17} | "
          f"{'gateway recv':>12}  (median ms per step; PCM per decode step)")
    for batch in (int(b) for b in args.batches.split(",")):
        r = run(batch, args.chunk_frames, args.steps, args.warmup)
        result["runs"].append(r)
        s = r["stages"]
        emit = f"{s['talker_emit']['median_ms']:.3f} ({s['talker_emit_in_socket']['median_ms']:.3f})"
        pcm = f"{s['vocoder_pcm_send']['median_ms']:.3f} ({s['vocoder_pcm_send_in_socket']['median_ms']:.3f})"
        print(f"{batch:>5} | {emit:>20} | {s['vocoder_intake']['median_ms']:>14.3f} | {pcm:>17} | "
              f"{s['gateway_pcm_receive']['median_ms']:>12.3f}", flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
