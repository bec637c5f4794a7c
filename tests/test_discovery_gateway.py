"""The gateway's Backend following DNS: talkers behind one name on two loopback addresses.

Two in-test talkers (ROUTERs answering heartbeats) listen on 127.0.0.1:P and 127.0.0.2:P; a fake
resolver maps `talkers.test` to whichever of them the test wants. Proves: a name's addresses are
separate peers, a joining talker is connected and used without restart, a leaving one gets no new
requests, stays connected while it holds a stream and is closed once idle.
"""
from __future__ import annotations

import asyncio

import pytest
import zmq
import zmq.asyncio

from async_support import run, until
from gateway.backend import Backend
from protos import wire
from protos.tts.internal.v1 import common_pb2
from test_discovery import FakeDns, free_port_on

pytestmark = pytest.mark.timeout(30)


async def fake_talker(router: zmq.asyncio.Socket, name: str) -> None:
    """Answers each gateway heartbeat with its own: healthy, 4 slots, one vocoder reachable."""
    while True:
        identity, *frames = await router.recv_multipart()
        msg_type, _header, _ = wire.decode(frames)
        if msg_type == wire.MessageType.HEARTBEAT:
            beat = common_pb2.Heartbeat(peer_id=name, role=common_pb2.PEER_ROLE_TALKER, incarnation=7,
                                        model="fake", num_healthy_vocoders=1,
                                        load=common_pb2.Load(num_slots_total=4))
            await router.send_multipart([identity, *wire.encode(wire.MessageType.HEARTBEAT, beat)])


def healthy_names(backend: Backend) -> set[str]:
    return {t.peer_id for t in backend.healthy_talkers()}


def test_backend_connects_joining_talkers_and_closes_departed_ones_once_idle():
    port = free_port_on("127.0.0.1", "127.0.0.2")
    dns = FakeDns({"talkers.test": ["127.0.0.1"]})

    async def body():
        context = zmq.asyncio.Context()
        routers, tasks = [], []
        for host, name in (("127.0.0.1", "talker-a"), ("127.0.0.2", "talker-b")):
            router = context.socket(zmq.ROUTER)
            router.setsockopt(zmq.LINGER, 0)
            router.bind(f"tcp://{host}:{port}")
            routers.append(router)
            tasks.append(asyncio.get_running_loop().create_task(fake_talker(router, name)))
        backend = Backend((f"tcp://talkers.test:{port}",), "tcp://127.0.0.1:*", heartbeat_interval_ms=50,
                          peer_timeout_ms=3000, resolve_interval_s=0.05, resolve=dns)
        backend.start()
        try:
            await until(lambda: healthy_names(backend) == {"talker-a"}, "talker-a healthy")
            assert [t.endpoint for t in backend.talkers] == [f"tcp://127.0.0.1:{port}"]

            dns.table["talkers.test"] = ["127.0.0.1", "127.0.0.2"]    # a second pod became ready
            await until(lambda: healthy_names(backend) == {"talker-a", "talker-b"}, "talker-b joins")
            a, b = backend.talkers
            assert b.endpoint == f"tcp://127.0.0.2:{port}" and b.task in backend.tasks

            box = backend.open_mailbox("req-1", b)                    # b holds a live stream...
            dns.table["talkers.test"] = ["127.0.0.1"]                 # ...when it leaves DNS
            await until(lambda: b.is_retired, "talker-b retired")
            assert backend.talkers == [a, b] and not b.sock.closed
            assert healthy_names(backend) == {"talker-a"} and backend.pick_talker() is a

            backend.close_mailbox(box)                                # its stream ended
            await until(lambda: backend.talkers == [a], "talker-b closed")
            assert b.sock.closed and b.task not in backend.tasks and b.task.done()
            assert healthy_names(backend) == {"talker-a"}
        finally:
            await backend.stop()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            context.destroy(linger=0)

    run(body(), 20)
