"""Discovery with real processes on loopback: one gateway, one talker, two vocoders (tiny, CPU).

The vocoders listen on the same port of two loopback addresses (127.0.0.1 and 127.0.0.2) and the
talker is given ONE endpoint, `tcp://vocoders.test:P`. The talker runs under a launcher that
answers getaddrinfo for `vocoders.test` from a JSON file the test rewrites (DNS records coming and
going); everything else - sockets, heartbeats, gRPC - is real. ZeroMQ never resolves the name
itself, so audio can only flow if the talker expanded it into per-address peers.

Proves, in order: both addresses become peers and share requests; a killed vocoder is dropped by
heartbeat and new requests succeed through the other; restarted on the same port it is used
again; once its record leaves DNS it gets no new requests (and its link closes) although alive;
when the record returns it is used again.
"""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

from client import TtsClient, make_config
from protos.tts.internal.v1 import admin_pb2, admin_pb2_grpc
from protos.tts.v1 import config_pb2
from test_discovery import free_port_on

pytestmark = pytest.mark.timeout(90)
ROOT = Path(__file__).resolve().parents[1]
STARTUP_S = 40.0
NUM_CONCURRENT = 4

FAKE_DNS_MAIN = r"""
import json, runpy, socket, sys
table_path, module = sys.argv[1], sys.argv[2]
real_getaddrinfo = socket.getaddrinfo

def fake_getaddrinfo(host, port, *args, **kwargs):
    with open(table_path) as f:
        table = json.load(f)
    if host not in table:
        return real_getaddrinfo(host, port, *args, **kwargs)
    if not table[host]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    return [(socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port))
            for a in table[host]]

socket.getaddrinfo = fake_getaddrinfo
sys.argv = [module, *sys.argv[3:]]
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""


class Child:
    """One service process; its log and ready file live in `work_dir/name.*`."""

    def __init__(self, work_dir: Path, name: str, command: list[str]) -> None:
        self.name = name
        self.ready_file = work_dir / f"{name}.ready.json"
        self.ready_file.unlink(missing_ok=True)
        self.log_path = work_dir / f"{name}.log"
        self.log = open(self.log_path, "ab")
        env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen([*command, "--ready-file", str(self.ready_file)], cwd=ROOT, env=env,
                                     stdout=self.log, stderr=subprocess.STDOUT)

    def wait_ready(self, deadline_s: float) -> dict:
        while not self.ready_file.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline_s:
                raise RuntimeError(f"{self.name} not ready (exit {self.proc.poll()}):\n{self.log_tail()}")
            time.sleep(0.05)
        return json.loads(self.ready_file.read_text())

    def log_tail(self) -> str:
        self.log.flush()
        return self.log_path.read_text(errors="replace")[-3000:]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.log.close()


def vocoder(work: Path, name: str, host: str, port: int) -> Child:
    return Child(work, name, [sys.executable, "-m", "vocoder_service", "--model", "tiny", "--device", "cpu",
                              "--cpu-threads", "1", "--bind", f"tcp://{host}:{port}", "--grpc-host", "127.0.0.1",
                              "--grpc-port", "0", "--heartbeat-interval-ms", "200", "--peer-id", name])


def write_dns(path: Path, addresses: list[str]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"vocoders.test": addresses}))
    os.replace(tmp, path)   # the talker never reads a half-written table


def stats(grpc_port: int, stub_class):
    with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
        return stub_class(channel).GetStats(admin_pb2.GetStatsRequest(), timeout=5)


def vocoder_view(talker_port: int) -> dict[str, bool]:
    """The talker's vocoder links: endpoint -> healthy."""
    return {v.endpoint: v.is_healthy for v in stats(talker_port, admin_pb2_grpc.TalkerAdminStub).vocoders}


def wait_for(condition, what: str, timeout_s: float = 10.0):
    deadline = time.monotonic() + timeout_s
    while not (value := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for: {what}"
        time.sleep(0.05)
    return value


def num_started(vocoder_info: dict) -> int:
    return stats(vocoder_info["grpc_port"], admin_pb2_grpc.VocoderAdminStub).requests.num_started


def synthesize_concurrently(gateway_target: str) -> None:
    cfg = make_config("vivian", language="english", encoding=config_pb2.AUDIO_ENCODING_FLOAT32, seed=7,
                      max_frames=8)

    async def body():
        async with TtsClient(gateway_target) as client:
            await client.wait_serving(10)   # the talker's heartbeat to the gateway lags its vocoder view
            return await asyncio.gather(*[client.synthesize(f"Request number {i}.", cfg, timeout_s=30)
                                          for i in range(NUM_CONCURRENT)])

    for response in asyncio.run(asyncio.wait_for(body(), 45)):
        assert response.summary.num_frames >= 1 and len(response.audio) > 0


def test_talker_follows_vocoders_through_kill_restart_and_dns_changes(tmp_path):
    port = free_port_on("127.0.0.1", "127.0.0.2")
    talker_port = free_port_on("127.0.0.1")
    a_at, b_at = f"tcp://127.0.0.1:{port}", f"tcp://127.0.0.2:{port}"
    dns = tmp_path / "dns.json"
    write_dns(dns, ["127.0.0.1", "127.0.0.2"])
    children: list[Child] = []
    try:
        children += [vocoder(tmp_path, "voc-a", "127.0.0.1", port), vocoder(tmp_path, "voc-b", "127.0.0.2", port)]
        children.append(Child(tmp_path, "talker", [
            sys.executable, "-c", FAKE_DNS_MAIN, str(dns), "talker_service", "--model", "tiny", "--device", "cpu",
            "--cpu-threads", "1", "--bind", f"tcp://127.0.0.1:{talker_port}", "--vocoders", f"tcp://vocoders.test:{port}",
            "--resolve-interval-s", "0.2", "--vocoder-timeout-s", "1.0", "--heartbeat-interval-ms", "200",
            "--grpc-host", "127.0.0.1", "--grpc-port", "0", "--max-slots", "4", "--max-seq-len", "256"]))
        children.append(Child(tmp_path, "gateway", [
            sys.executable, "-m", "gateway", "--model", "tiny", "--talkers", f"tcp://127.0.0.1:{talker_port}",
            "--grpc-host", "127.0.0.1", "--grpc-port", "0", "--metrics-port", "-1",
            "--voices-dir", str(tmp_path / "voices")]))
        deadline_s = time.monotonic() + STARTUP_S
        voc_a, voc_b, talker, gateway = (child.wait_ready(deadline_s) for child in children)
        target = f"127.0.0.1:{gateway['grpc_port']}"
        tport = talker["grpc_port"]

        # one name, two addresses: two peers, and concurrent requests use both
        wait_for(lambda: vocoder_view(tport) == {a_at: True, b_at: True}, "both vocoders healthy at the talker")
        synthesize_concurrently(target)
        a_before, b_before = num_started(voc_a), num_started(voc_b)
        assert a_before >= 1 and b_before >= 1 and a_before + b_before == NUM_CONCURRENT

        # kill b: heartbeats drop it, new requests all go through a
        children[1].kill()
        wait_for(lambda: vocoder_view(tport) == {a_at: True, b_at: False}, "the talker sees voc-b lost")
        synthesize_concurrently(target)
        assert num_started(voc_a) == a_before + NUM_CONCURRENT

        # restart b on the same port: it is used again
        children[1] = vocoder(tmp_path, "voc-b", "127.0.0.2", port)
        voc_b = children[1].wait_ready(time.monotonic() + STARTUP_S)
        wait_for(lambda: vocoder_view(tport) == {a_at: True, b_at: True}, "restarted voc-b healthy again")
        synthesize_concurrently(target)
        b_restarted = num_started(voc_b)
        assert b_restarted >= 1

        # b's record leaves DNS: its link closes and it gets nothing new although it is alive
        write_dns(dns, ["127.0.0.1"])
        wait_for(lambda: vocoder_view(tport) == {a_at: True}, "voc-b's link closed after leaving DNS")
        synthesize_concurrently(target)
        assert num_started(voc_b) == b_restarted

        # the record returns: a new link, and b takes requests again
        write_dns(dns, ["127.0.0.1", "127.0.0.2"])
        wait_for(lambda: vocoder_view(tport) == {a_at: True, b_at: True}, "voc-b back from DNS and healthy")
        synthesize_concurrently(target)
        assert num_started(voc_b) > b_restarted
    except BaseException:
        for child in children:
            print(f"---- {child.name} ----\n{child.log_tail()}")
        raise
    finally:
        for child in children:
            child.kill()
