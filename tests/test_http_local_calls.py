"""gateway/http/local_calls.py: the HTTP face calling the gateway's servicer in-process.

Scripted servicers pin down the call's mechanics (order, errors, cancellation, backpressure); the
real servicer, on a fake talker, shows that admission, refusals and clean-up are gRPC's: a refusal
maps to its HTTP status, a cancel closes the session (the talker gets an ABORT) and the active
count returns to 0, also when an HTTP client disconnects mid-stream. Every wait has a deadline;
assertions are on the order of events, not on times.
"""
from __future__ import annotations

import asyncio
import gc
import itertools
import logging

import grpc
import pytest

from async_support import run, until
from checkpoint.files import resolve_model_dir
from gateway.http.errors import grpc_error
from gateway.http.local_calls import LocalGateway, LocalRpcError, whole_text_requests
from protos.tts.v1 import config_pb2, tts_pb2
from test_gateway_support import POLL_TIMEOUT_S, FakeTalker, running_gateway

pytestmark = pytest.mark.timeout(120)


async def spin(times: int = 200) -> None:
    """Let every ready task run, `times` loop iterations over (no wall-clock wait)."""
    for _ in range(times):
        await asyncio.sleep(0)


async def wait_until(condition, what: str):
    return await until(condition, what, POLL_TIMEOUT_S)


def numbered(i: int) -> tts_pb2.StreamSynthesizeResponse:
    return tts_pb2.StreamSynthesizeResponse(audio=tts_pb2.AudioChunk(sequence_number=i))


class Scripted:
    """A servicer whose StreamSynthesize yields `count` numbered messages (None: without end), then
    ends as `end` says: None (cleanly), "abort" (context.abort UNAVAILABLE) or "raise" (a bug).
    `events` records each yield and what reached the handler at the end."""

    def __init__(self, count: int | None = None, end: str | None = None) -> None:
        self.count, self.end = count, end
        self.events: list[tuple] = []

    async def StreamSynthesize(self, requests, context):
        i = -1
        try:
            for i in itertools.count() if self.count is None else range(self.count):
                self.events.append(("yield", i))
                yield numbered(i)
            if self.end == "abort":
                await context.abort(grpc.StatusCode.UNAVAILABLE, "talker lost")
            if self.end == "raise":
                raise RuntimeError("a bug in the handler")
            self.events.append(("ended",))
        except asyncio.CancelledError:
            self.events.append(("cancelled", i))   # at the yield of message i
            raise
        except GeneratorExit:
            self.events.append(("closed", i))
            raise


async def no_requests():
    return
    yield


async def read_all(responses) -> list[int]:
    return [r.audio.sequence_number async for r in responses]


# ---- the call's mechanics, on scripted servicers -------------------------------------------------
def test_messages_arrive_in_order_past_the_queue_bound_then_the_end():
    async def body():
        servicer = Scripted(count=200)
        gateway = LocalGateway(servicer, max_buffered=8)
        call, responses = gateway.stream(no_requests())
        assert await read_all(responses) == list(range(200))
        assert servicer.events[-1] == ("ended",)
        with pytest.raises(StopAsyncIteration):   # and stays ended
            await responses.__anext__()
        await wait_until(lambda: call.done() and not gateway.live, "the handler task ends")
    run(body())


@pytest.mark.parametrize("end, code, http_status", [("abort", grpc.StatusCode.UNAVAILABLE, 503),
                                                    ("raise", grpc.StatusCode.UNKNOWN, 500)])
def test_a_failure_mid_stream_comes_after_the_messages_before_it(end, code, http_status, caplog):
    async def body():
        gateway = LocalGateway(Scripted(count=3, end=end), max_buffered=64)
        _, responses = gateway.stream(no_requests())
        seen = []
        with pytest.raises(LocalRpcError) as failure:
            async for response in responses:
                seen.append(response.audio.sequence_number)
        assert seen == [0, 1, 2]
        return failure.value
    with caplog.at_level(logging.ERROR, logger="gateway.http.local_calls"):
        failure = run(body())
    assert failure.code() == code and isinstance(failure, LocalRpcError)
    assert grpc_error(failure)[0] == http_status
    if end == "raise":   # as grpc.aio reports a handler's bug: UNKNOWN naming it, and a log line
        assert "RuntimeError" in failure.details() and "a bug in the handler" in failure.details()
        assert any(r.exc_info and "a bug in the handler" in str(r.exc_info[1]) for r in caplog.records)
    else:
        assert failure.details() == "talker lost" and not caplog.records


def test_a_handler_blocks_when_its_reader_does_not_read():
    async def body():
        servicer = Scripted()   # without end
        gateway = LocalGateway(servicer, max_buffered=4)
        call, responses = gateway.stream(no_requests())
        await spin()
        # 4 queued and the 5th held at the handler's yield: it makes no more while nobody reads
        assert servicer.events == [("yield", i) for i in range(5)]
        assert (await responses.__anext__()).audio.sequence_number == 0
        await spin()
        assert servicer.events[-1] == ("yield", 5) and len(servicer.events) == 6   # one read, one more made
        await responses.aclose()
        await wait_until(call.done, "the handler task ends")
        assert servicer.events[-1] == ("cancelled", 5)   # cancelled where it waited: at its yield
    run(body())


def test_the_default_bound_is_64_messages():
    async def body():
        servicer = Scripted()
        _, responses = LocalGateway(servicer).stream(no_requests())
        await spin()
        assert len(servicer.events) == 64 + 1
        await responses.aclose()
    run(body())


def test_aclose_and_cancel_reach_the_handler_as_cancelled_error():
    async def body():
        for how in ("aclose", "cancel"):
            servicer = Scripted()
            gateway = LocalGateway(servicer, max_buffered=2)
            call, responses = gateway.stream(no_requests())
            assert (await responses.__anext__()).audio.sequence_number == 0
            if how == "aclose":
                await responses.aclose()
            else:
                assert call.cancel() and not call.cancel()   # once: a second is a no-op
            assert call.cancelled()
            await wait_until(lambda: call.done() and not gateway.live, "the handler task ends")
            assert servicer.events[-1][0] == "cancelled", (how, servicer.events[-3:])
            with pytest.raises(LocalRpcError) as later:   # queued messages are not read after a cancel
                await responses.__anext__()
            assert later.value.code() == grpc.StatusCode.CANCELLED
    run(body())


def test_cancel_wakes_a_reader_that_waits():
    """ws.py's client reader cancels the call while the audio sender waits on it."""
    class WaitsForText:   # one message, then it waits (for client text, say) without end
        async def StreamSynthesize(self, requests, context):
            yield numbered(0)
            await asyncio.Event().wait()

    async def body():
        gateway = LocalGateway(WaitsForText(), max_buffered=4)
        call, responses = gateway.stream(no_requests())
        reader = asyncio.ensure_future(read_all(responses))
        await spin()
        assert not reader.done()   # it read message 0 and waits for the next
        call.cancel()
        with pytest.raises(LocalRpcError) as failure:
            await asyncio.wait_for(reader, POLL_TIMEOUT_S)
        assert failure.value.code() == grpc.StatusCode.CANCELLED
        await wait_until(lambda: not gateway.live, "the handler task ends")
    run(body())


def test_responses_dropped_unread_cancel_the_handler():
    """A response whose body never began (the client left first) has no finally to run."""
    async def body():
        servicer = Scripted()
        gateway = LocalGateway(servicer, max_buffered=2)
        gateway.stream(no_requests())   # call and responses dropped at once
        gc.collect()
        await wait_until(lambda: not gateway.live, "the handler task ends")
        assert servicer.events[-1][0] == "cancelled"
    run(body())


def test_drain_waits_for_the_grace_then_cancels():
    async def body():
        finishing, endless = Scripted(count=3), Scripted()
        gateway = LocalGateway(finishing, max_buffered=8)
        _, done_responses = gateway.stream(no_requests())
        gateway.servicer = endless
        _, live_responses = gateway.stream(no_requests())
        await spin()   # the first has ended (3 messages queued), the second waits on its full queue
        assert finishing.events[-1] == ("ended",) and len(gateway.live) == 1
        await gateway.drain(0.0)
        assert not gateway.live and endless.events[-1][0] == "cancelled" and finishing.events[-1] == ("ended",)
        assert await read_all(done_responses) == [0, 1, 2]   # what was made before the drain is still read
        with pytest.raises(LocalRpcError):
            await read_all(live_responses)
    run(body())


# ---- the real servicer on a fake talker ------------------------------------------------------------
class HoldingTalker(FakeTalker):
    """Never sends a request's final chunk: its stream stays open until it is aborted."""

    def _emit(self, req, ids, is_final):
        if not is_final:
            super()._emit(req, ids, is_final)


@pytest.fixture(scope="module")
def model_dir():
    return resolve_model_dir("tiny")


@pytest.fixture
def talker():
    fake = HoldingTalker()
    yield fake
    fake.close()


def speaker_config(name: str = "Vivian", **kw) -> config_pb2.SynthesisConfig:
    return config_pb2.SynthesisConfig(speaker=config_pb2.SpeakerVoice(name=name), language="English",
                                      audio_format=config_pb2.AudioFormat(encoding=config_pb2.AUDIO_ENCODING_PCM16),
                                      **kw)


def aborts(talker: FakeTalker) -> dict:
    with talker._lock:
        return {rid: r.abort for rid, r in talker.requests.items() if r.abort is not None}


def test_refusals_before_the_start_map_to_their_http_statuses(model_dir, talker, tmp_path):
    async def body():
        async with running_gateway(model_dir, [talker.endpoint], tmp_path, max_streams=1) as gw:
            gateway = LocalGateway(gw.servicer)
            assert (await gateway.model()).model == "tiny"
            _, responses = gateway.stream(whole_text_requests(speaker_config("nobody"), "Hello."))
            with pytest.raises(LocalRpcError) as unknown:
                await responses.__anext__()
            status, error = grpc_error(unknown.value)
            assert status == 400 and error["error"]["param"] == "config.speaker.name"

            _, held = gateway.stream(whole_text_requests(speaker_config(), "Hello there."))
            assert (await held.__anext__()).HasField("start")   # the one admitted stream, kept open
            _, second = gateway.stream(whole_text_requests(speaker_config(), "Hello."))
            with pytest.raises(LocalRpcError) as refused:
                await second.__anext__()
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and grpc_error(refused.value)[0] == 429
            await held.aclose()
            await wait_until(lambda: gw.servicer.num_active == 0 and not gateway.live, "the streams end")
    run(body(), 3 * POLL_TIMEOUT_S)


def test_a_cancel_closes_the_servicer_session(model_dir, talker, tmp_path):
    """Streaming text: start, audio for the text sent; then the reader closes. The talker gets the
    ABORT of a cancelled client (CancelledError reached the servicer) and the active count is 0."""
    async def body():
        async with running_gateway(model_dir, [talker.endpoint], tmp_path) as gw:
            gateway = LocalGateway(gw.servicer)
            requests: asyncio.Queue = asyncio.Queue()
            await requests.put(tts_pb2.StreamSynthesizeRequest(
                config=speaker_config(text_mode=config_pb2.TEXT_MODE_STREAMING)))

            async def drain_queue():
                while (message := await requests.get()) is not None:
                    yield message
            call, responses = gateway.stream(drain_queue())
            start = (await responses.__anext__()).start
            assert gw.servicer.num_active == 1
            await requests.put(tts_pb2.StreamSynthesizeRequest(text="Hello there, "))
            await requests.put(tts_pb2.StreamSynthesizeRequest(flush=tts_pb2.Flush(flush_id="f")))
            kinds = []
            while "audio" not in kinds:
                kinds.append((await asyncio.wait_for(responses.__anext__(), POLL_TIMEOUT_S)).WhichOneof("response"))
            await responses.aclose()
            abort = (await wait_until(lambda: aborts(talker), "the talker gets an ABORT"))[start.request_id]
            assert abort.message == "client cancelled or deadline passed"   # the servicer saw CancelledError
            await wait_until(lambda: gw.servicer.num_active == 0 and not gateway.live, "the stream ends")
            assert gw.metrics.active_streams._value.get() == 0
    run(body(), 3 * POLL_TIMEOUT_S)


def test_an_http_client_gone_mid_stream_cancels_the_handler(model_dir, talker, tmp_path):
    """POST /v1/audio/speech, the first audio bytes read, then the connection closed: Starlette
    cancels the response's iteration, which must cancel the handler: no task left, count 0."""
    async def body():
        async with running_gateway(model_dir, [talker.endpoint], tmp_path, http_port=0,
                                   http_host="127.0.0.1") as gw:
            reader, writer = await asyncio.open_connection("127.0.0.1", gw.http_port)
            payload = b'{"voice": "vivian", "input": "Hello there, how are you?", "response_format": "pcm"}'
            writer.write(b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (len(payload), payload))
            await writer.drain()
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), POLL_TIMEOUT_S)
            assert head.startswith(b"HTTP/1.1 200") and b"chunked" in head.lower()
            assert await asyncio.wait_for(reader.read(1024), POLL_TIMEOUT_S)   # audio began
            assert gw.servicer.num_active == 1 and len(gw.http.client.live) == 1
            writer.close()
            await wait_until(lambda: aborts(talker), "the talker gets an ABORT")
            await wait_until(lambda: gw.servicer.num_active == 0 and not gw.http.client.live,
                             "the handler task ends and the active count is 0")
    run(body(), 3 * POLL_TIMEOUT_S)
