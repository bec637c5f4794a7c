"""`python -m gateway --workers N` (the launcher's --gateway-workers): N gateway processes serve one
gRPC and one HTTP port (SO_REUSEPORT), each taking whole client connections, each with its own
audio endpoint and metrics port; the group drains and stops together (tiny checkpoint, CPU)."""
from __future__ import annotations

import asyncio
import json
import urllib.request

import pytest

from client import TtsClient, make_config
from process_support import LauncherProcess, is_alive
from protos.tts.v1 import config_pb2

pytestmark = pytest.mark.timeout(300)
NUM_CONNECTIONS = 16     # all 16 on one of 2 workers by chance: 1 in 32768


def calls_served(metrics_port: int) -> float:
    """tts_requests_total, summed over methods, from one gateway worker's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as reply:
        lines = reply.read().decode().splitlines()
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith("tts_requests_total{"))


def test_two_gateway_workers_share_the_ports_and_each_serves_connections(tmp_path):
    stack = LauncherProcess(tmp_path, ["--grpc-port", "0", "--metrics-port", "0", "--http-port", "0",
                                       "--health-timeout-s", "120", "--drain-grace-s", "2", "--gateway-workers", "2",
                                       "--vocoder-arg=--cpu-threads=1", "--talker-arg=--cpu-threads=1"])
    try:
        ready = stack.wait_ready(150)
        gateway = json.loads((tmp_path / "gateway.ready.json").read_text())
        workers = gateway["workers"]
        # one gRPC port and one HTTP port for both; their own audio endpoints and metrics ports
        assert len(workers) == 2 and int(ready["grpc_target"].rsplit(":", 1)[1]) == gateway["grpc_port"]
        assert workers[0]["grpc_port"] == workers[1]["grpc_port"] and workers[0]["http_port"] == workers[1]["http_port"]
        assert workers[0]["audio_endpoint"] != workers[1]["audio_endpoint"]
        assert workers[0]["metrics_port"] != workers[1]["metrics_port"]
        assert len({gateway["pid"], workers[0]["pid"], workers[1]["pid"]}) == 3
        assert {"gateway", "gateway-worker-0", "gateway-worker-1"} <= set(ready["pids"])
        cfg = make_config("vivian", language="english", encoding=config_pb2.AUDIO_ENCODING_FLOAT32, seed=3, max_frames=4)

        async def speak(client: TtsClient):
            return [r async for r in client.stream(["Hello ", "there."], cfg, timeout_s=60)][-1].summary

        async def speak_on_own_connections():
            clients = [TtsClient(ready["grpc_target"], own_connection=True) for _ in range(NUM_CONNECTIONS)]
            try:
                return await asyncio.gather(*(speak(c) for c in clients))
            finally:
                for c in clients:
                    await c.close()

        summaries = asyncio.run(asyncio.wait_for(speak_on_own_connections(), 200))
        assert [s.num_frames for s in summaries] == [4] * NUM_CONNECTIONS
        # each worker logs the calls it served: the kernel gave both some of the connections
        log = (tmp_path / "gateway.log").read_text()
        served = [log.count(f"[worker {i}] gateway.servicer: request") for i in range(2)]
        assert sum(served) >= NUM_CONNECTIONS and all(n > 0 for n in served), served
        # ... and every worker's /metrics counts all of them (one view of the group)
        assert [calls_served(w["metrics_port"]) for w in workers] == [NUM_CONNECTIONS, NUM_CONNECTIONS]
        # the HTTP port answers too (whichever worker the connection lands on)
        with urllib.request.urlopen(f"{ready['http_url']}/v1/models", timeout=10) as reply:
            assert json.loads(reply.read())["data"][0]["object"] == "model"
    finally:
        code = stack.stop(30)
    assert code == 0
    assert not any(is_alive(pid) for pid in (gateway["pid"], *(w["pid"] for w in workers)))


def test_the_default_is_four_gateway_workers_beside_a_gpu_and_one_on_cpu():
    from launcher.main import default_gateway_workers
    assert default_gateway_workers("cpu", num_cpus=64) == 1
    assert default_gateway_workers("cuda", num_cpus=16) == 4
    assert default_gateway_workers("cuda:1", num_cpus=128) == 4
    assert default_gateway_workers("cuda", num_cpus=8) == 2 and default_gateway_workers("cuda", num_cpus=2) == 1
