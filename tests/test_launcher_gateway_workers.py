"""`python -m launcher --gateway-workers 2`: two gateway processes serve one gRPC port (SO_REUSEPORT),
each taking whole client connections; the stack stops them all (tiny checkpoint, CPU)."""
from __future__ import annotations

import asyncio
import json

import pytest

from client import TtsClient, make_config
from process_support import LauncherProcess, is_alive
from protos.tts.v1 import config_pb2

pytestmark = pytest.mark.timeout(300)
NUM_CONNECTIONS = 16     # all 16 on one of 2 workers by chance: 1 in 32768


def test_two_gateway_workers_share_the_port_and_each_serves_connections(tmp_path):
    stack = LauncherProcess(tmp_path, ["--grpc-port", "0", "--metrics-port", "-1", "--health-timeout-s", "120",
                                       "--drain-grace-s", "2", "--gateway-workers", "2",
                                       "--vocoder-arg=--cpu-threads=1", "--talker-arg=--cpu-threads=1"])
    try:
        ready = stack.wait_ready(150)
        workers = {name: json.loads((tmp_path / f"{name}.ready.json").read_text()) for name in ("gateway", "gateway-2")}
        # one port, two processes; only the first serves metrics (and HTTP when asked)
        assert workers["gateway"]["grpc_port"] == workers["gateway-2"]["grpc_port"] == int(ready["grpc_target"].rsplit(":", 1)[1])
        assert workers["gateway"]["pid"] != workers["gateway-2"]["pid"]
        assert workers["gateway-2"]["metrics_port"] == 0 and workers["gateway-2"]["http_port"] == -1
        assert set(ready["pids"]) == {"vocoder", "talker", "gateway", "gateway-2"}
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
        # each worker logs the streams it served: the kernel gave both some of the connections
        served = {name: (tmp_path / f"{name}.log").read_text().count(": stream on talker") for name in workers}
        assert sum(served.values()) >= NUM_CONNECTIONS and all(n > 0 for n in served.values()), served
    finally:
        code = stack.stop(30)
    assert code == 0
    assert not any(is_alive(w["pid"]) for w in workers.values())


def test_the_default_is_four_gateway_workers_beside_a_gpu_and_one_on_cpu():
    from launcher.main import default_gateway_workers
    assert default_gateway_workers("cpu", num_cpus=64) == 1
    assert default_gateway_workers("cuda", num_cpus=16) == 4
    assert default_gateway_workers("cuda:1", num_cpus=128) == 4
    assert default_gateway_workers("cuda", num_cpus=8) == 2 and default_gateway_workers("cuda", num_cpus=2) == 1
