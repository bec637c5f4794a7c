"""service_common/zmq_quick.py: sends and receives without a future per message, in order, and
without leaving an awaited receive asleep (ZeroMQ's descriptor is edge-triggered)."""
from __future__ import annotations

import asyncio

import zmq
import zmq.asyncio

from service_common.zmq_quick import QuickSocket

WAIT_S = 5.0


def _pair(ctx: zmq.asyncio.Context, name: str):
    router = ctx.socket(zmq.ROUTER)
    router.bind(f"inproc://{name}")
    dealer = ctx.socket(zmq.DEALER)
    dealer.setsockopt(zmq.IDENTITY, b"d")
    dealer.connect(f"inproc://{name}")
    return router, dealer


def test_quick_sends_arrive_whole_and_in_order():
    async def main():
        ctx = zmq.asyncio.Context()
        router, dealer = _pair(ctx, "order")
        sender = QuickSocket(dealer)
        for i in range(200):
            await sender.send_multipart([b"msg", str(i).encode()])
        got = [await asyncio.wait_for(router.recv_multipart(), WAIT_S) for _ in range(200)]
        ctx.destroy(linger=0)
        return got
    got = asyncio.run(main())
    assert got == [[b"d", b"msg", str(i).encode()] for i in range(200)]


def test_a_quick_send_does_not_put_an_awaited_receive_to_sleep():
    # the ROUTER's reply reaches the DEALER's pipe, then a quick send on the DEALER takes in the
    # pending commands (and with them the descriptor's edge): the awaited receive must still wake
    # (without the re-check it slept until the next message; start messages waited ~1 s for a
    # heartbeat in benchmarks/probe_gateway_starts.py)
    async def main():
        ctx = zmq.asyncio.Context()
        router, dealer = _pair(ctx, "edge")
        sender = QuickSocket(dealer)
        await sender.send_multipart([b"hello"])
        await asyncio.wait_for(router.recv_multipart(), WAIT_S)
        receiving = dealer.recv_multipart()     # a future: the receive is under way
        await asyncio.sleep(0.05)              # the receive is awaited, its reader registered
        router_now = zmq.Socket.shadow(router.underlying)
        router_now.send_multipart([b"d", b"ack"])
        await sender.send_multipart([b"text"])  # no loop turn between the reply and this send
        reply = await asyncio.wait_for(receiving, WAIT_S)
        ctx.destroy(linger=0)
        return reply
    assert asyncio.run(main()) == [b"ack"]


def test_receive_batch_takes_what_is_there_in_order_up_to_its_bound():
    async def main():
        ctx = zmq.asyncio.Context()
        pull = ctx.socket(zmq.PULL)
        pull.bind("inproc://batch")
        push_socket = ctx.socket(zmq.PUSH)
        push = zmq.Socket.shadow(push_socket.underlying)
        push.connect("inproc://batch")
        for i in range(10):
            push.send(str(i).encode())
        quick = QuickSocket(pull)
        got: list[list[bytes]] = []
        handle = lambda frames: got.append([f.bytes for f in frames])   # noqa: E731
        await asyncio.wait_for(quick.receive_batch(handle, max_batch=4), WAIT_S)
        first = len(got)
        while len(got) < 10:
            await asyncio.wait_for(quick.receive_batch(handle, max_batch=4), WAIT_S)
        waiting = asyncio.get_running_loop().create_task(quick.receive_batch(handle, max_batch=4))
        await asyncio.sleep(0.05)
        push.send(b"late")                      # an awaited batch still wakes for a new message
        await asyncio.wait_for(waiting, WAIT_S)
        ctx.destroy(linger=0)
        return first, got
    first, got = asyncio.run(main())
    assert first == 4
    assert got == [[str(i).encode()] for i in range(10)] + [[b"late"]]


def test_quick_sends_of_one_loop_turn_share_one_re_check():
    async def main():
        ctx = zmq.asyncio.Context()
        router, dealer = _pair(ctx, "recheck")
        sender = QuickSocket(dealer)
        rechecks = []
        real = sender.recheck
        sender.recheck = lambda: (rechecks.append(1), real())
        for i in range(10):              # the quick path never yields: all ten in this turn
            await sender.send_multipart([b"msg", str(i).encode()])
        during = len(rechecks)
        await asyncio.sleep(0)           # the next turn runs the one re-check
        await asyncio.sleep(0)
        got = [await asyncio.wait_for(router.recv_multipart(), WAIT_S) for _ in range(10)]
        ctx.destroy(linger=0)
        return during, len(rechecks), got
    during, after, got = asyncio.run(main())
    assert (during, after) == (0, 1)
    assert got == [[b"d", b"msg", str(i).encode()] for i in range(10)]
