"""ListVoices / RegisterVoice / DeleteVoice and per-request clones against the fake talker (Base model)."""
from __future__ import annotations

import io

import grpc
import numpy as np
import pytest
import soundfile

from async_support import run
from test_gateway_support import FakeTalker, running_gateway
from checkpoint.files import resolve_model_dir
from client import TtsClient, make_config
from gateway.voices import VoiceRegistry
from protos.tts.v1 import config_pb2, voices_pb2

pytestmark = pytest.mark.timeout(90)


def reference_wav(tmp_path, seconds: float = 2.0, rate: int = 16000):
    path = tmp_path / "ref.wav"
    t = np.arange(int(seconds * rate)) / rate
    soundfile.write(path, 0.3 * np.sin(2 * np.pi * 220 * t), rate)
    return path


def test_register_use_list_delete_and_persist(tmp_path):
    model_dir = resolve_model_dir("tiny-base")
    talker = FakeTalker()
    ref = reference_wav(tmp_path)

    async def body():
        async with running_gateway(model_dir, [talker.endpoint], tmp_path, model_name="tiny-base") as gw:
            async with TtsClient(f"127.0.0.1:{gw.port}") as client:
                voice = await client.register_voice("my-voice", ref, reference_text="Hello there.")
                with pytest.raises(grpc.aio.AioRpcError) as dup:
                    await client.register_voice("my-voice", ref, reference_text="Hello there.")
                listed = await client.list_voices()
                got = [r async for r in client.stream(["Say this."], make_config("id:my-voice", seed=1))]
                cloned = [r async for r in client.stream(["Say this."], make_config(
                    reference_audio=ref, reference_text="Hello there.", seed=1))]
                with pytest.raises(grpc.aio.AioRpcError) as short:
                    await client.register_voice("short", reference_wav(tmp_path, 0.2), reference_text="x")
                deleted = await client.delete_voice("my-voice")
                with pytest.raises(grpc.aio.AioRpcError) as gone:
                    [r async for r in client.stream(["Hi."], make_config("id:my-voice"))]
                return voice, dup.value, listed, got, cloned, short.value, deleted, gone.value

    try:
        voice, dup, listed, got, cloned, short, deleted, gone = run(body(), 60)
    finally:
        talker.close()
    assert voice.voice_id == "my-voice" and voice.reference_audio_s == pytest.approx(2.0)
    assert dup.code() == grpc.StatusCode.ALREADY_EXISTS
    assert listed.models[0].model_type == voices_pb2.MODEL_TYPE_BASE and "english" in listed.models[0].languages
    assert [v.voice_id for v in listed.registered_voices] == ["my-voice"]
    assert got[-1].HasField("summary") and cloned[-1].HasField("summary")
    starts = [r.start for r in talker.requests.values()]
    assert all(s.HasField("clone") and len(s.clone.speaker_embedding) == 4 for s in starts)
    assert len(talker.encoded_voices) == 2   # one registration + one per-request clone
    assert short.code() == grpc.StatusCode.INVALID_ARGUMENT and "too short" in short.details()
    assert deleted.voice_id == "my-voice"
    assert gone.code() == grpc.StatusCode.NOT_FOUND and "config.registered_voice_id" in gone.details()
    assert VoiceRegistry(tmp_path / "voices").records == {}


def test_registry_survives_a_restart(tmp_path):
    from gateway.voices import VoiceRecord
    from protos.tts.internal.v1 import talker_pb2
    reg = VoiceRegistry(tmp_path)
    reg.put(VoiceRecord(voices_pb2.RegisteredVoice(voice_id="v1", model="m"),
                        talker_pb2.VoicePrompt(model="m", speaker_embedding=[1.0, 2.0])))
    again = VoiceRegistry(tmp_path)
    assert list(again.records) == ["v1"] and list(again.get("v1").prompt.speaker_embedding) == [1.0, 2.0]


def test_a_slow_clone_encoding_counts_in_time_to_first_audio(tmp_path):
    """The text waits unread while the per-request clone is encoded: the summary's TTFA includes
    that wait and says how long it was (voice_encode_ms); a registered voice waits for nothing."""
    model_dir = resolve_model_dir("tiny-base")
    talker = FakeTalker(delay_encode_s=0.4)
    ref = reference_wav(tmp_path)

    async def body():
        async with running_gateway(model_dir, [talker.endpoint], tmp_path, model_name="tiny-base") as gw:
            async with TtsClient(f"127.0.0.1:{gw.port}") as client:
                cloned = [r async for r in client.stream(["Say this."], make_config(
                    reference_audio=ref, reference_text="Hello there.", seed=1))]
                await client.register_voice("my-voice", ref, reference_text="Hello there.")
                num_encoded = len(talker.encoded_voices)   # the clone's and the registration's
                registered = [r async for r in client.stream(["Say this."], make_config("id:my-voice", seed=1))]
                return cloned[-1].summary, registered[-1].summary, num_encoded, registered[0].start.request_id

    try:
        cloned, registered, num_encoded, registered_id = run(body(), 60)
    finally:
        talker.close()
    assert cloned.timings.voice_encode_ms >= 400
    assert cloned.time_to_first_audio_ms >= cloned.timings.voice_encode_ms
    # the registered voice asked for no encoding (a count, not a TTFA bound a busy machine can break)
    assert num_encoded == len(talker.encoded_voices) == 2
    assert registered.timings.voice_encode_ms == 0
    assert talker.requests[registered_id].start.HasField("clone")   # it went with the stored prompt


def test_gateways_sharing_a_voices_directory_see_each_others_voices(tmp_path):
    """Stateless gateways behind one address (issue #38): a voice registered through one is spoken,
    listed, replaced and deleted through the other, with no restart (the shared directory is the truth)."""
    model_dir = resolve_model_dir("tiny-base")
    talker = FakeTalker()
    ref = reference_wav(tmp_path)

    async def body():
        async with running_gateway(model_dir, [talker.endpoint], tmp_path, model_name="tiny-base") as one, \
                running_gateway(model_dir, [talker.endpoint], tmp_path, model_name="tiny-base") as two:
            async with TtsClient(f"127.0.0.1:{one.port}") as a, TtsClient(f"127.0.0.1:{two.port}") as b:
                await a.register_voice("shared", ref, reference_text="Hello there.")
                listed = [v.voice_id for v in (await b.list_voices()).registered_voices]
                spoken = [r async for r in b.stream(["Say this."], make_config("id:shared", seed=1))]
                await b.register_voice("shared", ref, reference_text="Hi again.", display_name="again", overwrite=True)
                replaced = [v.display_name for v in (await a.list_voices()).registered_voices]
                await b.delete_voice("shared")
                with pytest.raises(grpc.aio.AioRpcError) as gone:
                    [r async for r in a.stream(["Hi."], make_config("id:shared"))]
                return listed, spoken, replaced, gone.value, (await a.list_voices()).registered_voices

    try:
        listed, spoken, replaced, gone, left = run(body(), 60)
    finally:
        talker.close()
    assert listed == ["shared"] and spoken[-1].HasField("summary")
    assert replaced == ["again"]
    assert gone.code() == grpc.StatusCode.NOT_FOUND and not left


def test_registry_lookups_from_many_threads_never_see_half_an_entry(tmp_path):
    """Lookups run in worker threads (the resolver and the voice RPCs, off the event loop) while
    others replace and delete the same voice: each sees the voice or None, never a KeyError from a
    record and its stamp read apart."""
    import sys
    import threading

    from gateway.voices import VoiceRecord
    from protos.tts.internal.v1 import talker_pb2

    reg = VoiceRegistry(tmp_path)
    record = VoiceRecord(voices_pb2.RegisteredVoice(voice_id="v1", model="m"),
                         talker_pb2.VoicePrompt(model="m", speaker_embedding=[1.0]))
    reg.put(record)
    errors, stop = [], threading.Event()

    def hammer(action) -> None:
        try:
            while not stop.is_set():
                action()
        except Exception as exc:   # noqa: BLE001 - any exception is the failure under test
            errors.append(exc)
            stop.set()

    def lookup() -> None:
        got = reg.get("v1")
        assert got is None or got.voice.voice_id == "v1"

    actions = [lookup, lookup, lambda: reg.list("m"), lambda: reg.put(record), lambda: reg.delete("v1")]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)   # switch threads as often as possible
    try:
        threads = [threading.Thread(target=hammer, args=(action,)) for action in actions]
        for thread in threads:
            thread.start()
        stop.wait(1.0)
        stop.set()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert errors == []
    reg.put(record)
    assert reg.get("v1").voice.voice_id == "v1" and list(reg.records) == ["v1"]


def test_voice_rpcs_touch_the_disk_off_the_event_loop(tmp_path):
    """ListVoices, RegisterVoice and DeleteVoice call the registry (files on a possibly shared,
    possibly slow volume) in worker threads: the loop keeps serving streams meanwhile."""
    import threading

    model_dir = resolve_model_dir("tiny-base")
    talker = FakeTalker()
    ref = reference_wav(tmp_path)
    calls: list[tuple[str, bool]] = []

    async def body():
        async with running_gateway(model_dir, [talker.endpoint], tmp_path, model_name="tiny-base") as gw:
            loop_thread = threading.get_ident()
            for name in ("get", "put", "delete", "list"):
                method = getattr(gw.voices, name)

                def traced(*args, _name=name, _method=method):
                    calls.append((_name, threading.get_ident() == loop_thread))
                    return _method(*args)
                setattr(gw.voices, name, traced)
            async with TtsClient(f"127.0.0.1:{gw.port}") as client:
                await client.register_voice("v", ref, reference_text="Hello there.")
                await client.list_voices()
                await client.delete_voice("v")

    try:
        run(body(), 60)
    finally:
        talker.close()
    assert {name for name, _ in calls} == {"get", "put", "list", "delete"}   # list and delete look up with get
    assert not any(on_loop for _, on_loop in calls), calls
