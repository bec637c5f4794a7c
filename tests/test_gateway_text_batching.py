"""Streamed text under load goes to the talker in batches (GatewayConfig.text_batch_ms): the first
text of a call at once, later text held for the rest of the window that began with the call's last
TEXT, everything held sent before a flush's ack and before END, and nothing held when the gateway
is not busy. Against the fake talker, which records each TEXT message."""
from __future__ import annotations

import asyncio
import time

import grpc
import pytest

from async_support import run
from test_gateway_support import FakeTalker, running_gateway
from checkpoint.files import resolve_model_dir
from gateway.text_tokenizer import IncrementalTokenizer, TextTokenizer
from protos.tts.v1 import config_pb2, tts_pb2, tts_pb2_grpc

pytestmark = pytest.mark.timeout(60)
WORDS = "Hello world. This is a streaming test, with several words!".split(" ")
DELTAS = [w + " " for w in WORDS[:-1]] + [WORDS[-1]]
WAIT_S = 10.0
ALWAYS_BUSY = {"text_batch_min_lag_ms": 0.0}        # any loop lag, none included, counts as busy
NEVER_BUSY = {"text_batch_min_lag_ms": 1e9}


@pytest.fixture(scope="module")
def model_dir():
    return resolve_model_dir("tiny")


@pytest.fixture(scope="module")
def tokenizer(model_dir):
    return TextTokenizer.from_dir(model_dir)


@pytest.fixture
def talker():
    fake = FakeTalker()
    yield fake
    fake.close()


def req(**kw) -> tts_pb2.StreamSynthesizeRequest:
    return tts_pb2.StreamSynthesizeRequest(**kw)


def config() -> config_pb2.SynthesisConfig:
    return config_pb2.SynthesisConfig(speaker=config_pb2.SpeakerVoice(name="Vivian"), language="English")


async def read_all(call) -> list:
    return [r async for r in call]


async def until(predicate, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} within {WAIT_S} s")
        await asyncio.sleep(0.01)


def stream_all(model_dir, talker, tmp_path, deltas, **overrides) -> list:
    """One call that sends its config, every delta and END at once; its responses."""
    async def body():
        async with running_gateway(model_dir, [talker.endpoint], tmp_path, **overrides) as gw:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{gw.port}") as channel:
                call = tts_pb2_grpc.TextToSpeechStub(channel).StreamSynthesize(timeout=WAIT_S)
                for message in [req(config=config())] + [req(text=d) for d in deltas]:
                    await call.write(message)
                await call.write(req(end=tts_pb2.EndOfInput()))
                await call.done_writing()
                return await read_all(call)
    return run(body())


def test_a_busy_gateway_sends_the_first_text_at_once_and_batches_the_rest(model_dir, tokenizer, talker, tmp_path):
    # a window far longer than the call: what is held goes with END, not with the timer
    responses = stream_all(model_dir, talker, tmp_path, DELTAS, text_batch_ms=5000.0, **ALWAYS_BUSY)
    assert responses[-1].HasField("summary")
    (fake,) = talker.requests.values()
    first = IncrementalTokenizer(tokenizer).feed(DELTAS[0])
    assert fake.texts[0] == first                      # the first word did not wait
    assert len(fake.texts) <= 3 < len(DELTAS)          # the rest: what END found held, then the last piece
    assert fake.tokens == tokenizer.target_ids("".join(DELTAS)) and fake.is_ended


def test_a_gateway_that_is_not_busy_sends_each_text_as_it_comes(model_dir, tokenizer, talker, tmp_path):
    stream_all(model_dir, talker, tmp_path, DELTAS, text_batch_ms=5000.0, **NEVER_BUSY)
    (fake,) = talker.requests.values()
    inc = IncrementalTokenizer(tokenizer)
    expected = [ids for ids in [inc.feed(d) for d in DELTAS] + [inc.flush()] if ids]
    assert fake.texts == expected


def test_held_text_goes_when_its_window_ends_without_waiting_for_more(model_dir, tokenizer, talker, tmp_path):
    async def body():
        async with running_gateway(model_dir, [talker.endpoint], tmp_path, text_batch_ms=100.0, **ALWAYS_BUSY) as gw:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{gw.port}") as channel:
                call = tts_pb2_grpc.TextToSpeechStub(channel).StreamSynthesize(timeout=WAIT_S)
                for message in [req(config=config()), req(text="Hello "), req(text="big "), req(text="world ")]:
                    await call.write(message)
                # no more text and no END: only the window's timer can send "big world"
                want = tokenizer.target_ids("Hello big world")
                await until(lambda: [r.tokens for r in talker.requests.values()] == [want],
                            "the held words did not reach the talker")
                (fake,) = talker.requests.values()
                texts, was_ended = list(fake.texts), fake.is_ended
                await call.write(req(end=tts_pb2.EndOfInput()))
                await call.done_writing()
                await read_all(call)
                return texts, was_ended

    texts, was_ended = run(body())
    assert not was_ended and texts[0] == tokenizer.target_ids("Hello") and len(texts) == 2


def test_a_flush_sends_what_is_held_before_its_ack(model_dir, tokenizer, talker, tmp_path):
    async def body():
        async with running_gateway(model_dir, [talker.endpoint], tmp_path, text_batch_ms=5000.0, **ALWAYS_BUSY) as gw:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{gw.port}") as channel:
                call = tts_pb2_grpc.TextToSpeechStub(channel).StreamSynthesize(timeout=WAIT_S)
                for message in [req(config=config()), req(text="Hello "), req(text="big wor"),
                                req(flush=tts_pb2.Flush(flush_id="f1"))]:
                    await call.write(message)
                async for response in call:
                    if response.HasField("flush_ack"):
                        (fake,) = talker.requests.values()
                        await until(lambda: fake.tokens == tokenizer.target_ids("Hello big wor"),
                                    "the held text did not reach the talker with the flush")
                        await call.write(req(end=tts_pb2.EndOfInput()))
                        await call.done_writing()
                        return response.flush_ack, await read_all(call)
        raise AssertionError("no flush ack")

    ack, rest = run(body())
    assert ack.flush_id == "f1" and ack.num_text_tokens == len(tokenizer.target_ids("Hello big wor"))
    assert rest[-1].HasField("summary")


def test_loop_lag_sees_a_loop_that_was_held():
    from gateway.loop_lag import LoopLag

    async def body():
        lag = LoopLag(interval_s=0.005)
        lag.start()
        try:
            await asyncio.sleep(0.02)
            time.sleep(0.08)             # the loop runs nothing else meanwhile: the tick due now waits
            for _ in range(20):          # a few loop turns (microseconds): the late tick runs in one
                await asyncio.sleep(0)
                if lag.lag_s >= 0.05:
                    break
            return lag.lag_s
        finally:
            lag.stop()

    assert run(body()) >= 0.05
