"""The OpenAI-compatible HTTP API and the WebSocket, against a real stack on loopback (tiny model,
CPU), with the official `openai` package as the client."""
from __future__ import annotations

import asyncio
import base64
import io
import json

import httpx
import numpy as np
import pytest
import soundfile

from process_support import http_stack

pytestmark = pytest.mark.timeout(180)
RATE_HZ = 24000
TEXT = "Hello from the HTTP API."
# The tiny model never samples end-of-speech: the frame budget (or max_frames) ends its audio.
SAMPLING = {"max_frames": 10, "min_frames": 10}   # a fixed length: no seed or EOS can cut a stream short
SAMPLES_PER_FRAME = 1920


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    work = tmp_path_factory.mktemp("http-stack")
    launcher = http_stack(work, "--gateway-arg=--max-text-chars=400")
    try:
        yield launcher.wait_ready(130)
    finally:
        launcher.stop(40)


@pytest.fixture(scope="module")
def client(stack):
    from openai import OpenAI
    return OpenAI(base_url=f"{stack['http_url']}/v1", api_key="unused", timeout=60, max_retries=0)


def decode(data: bytes, response_format: str) -> tuple[np.ndarray, int]:
    if response_format == "pcm":
        return np.frombuffer(data, "<i2").astype(np.float32) / 32768, RATE_HZ
    if response_format == "wav":   # streamed: the header's length is unknown (0xFFFFFFFF)
        assert data[:4] == b"RIFF" and data[8:12] == b"WAVE"
        return np.frombuffer(data[44:], "<i2").astype(np.float32) / 32768, int.from_bytes(data[24:28], "little")
    audio, rate = soundfile.read(io.BytesIO(data), dtype="float32")
    return audio, rate


def check_audio(audio: np.ndarray, rate: int, num_frames: int = SAMPLING["max_frames"], exact: bool = True) -> None:
    assert rate == RATE_HZ
    # Opus and MP3 pad or trim a little at the edges (less than a frame); PCM, WAV and FLAC are exact.
    assert abs(audio.size - num_frames * SAMPLES_PER_FRAME) <= (0 if exact else 1200), audio.size
    assert np.sqrt(np.mean(audio.astype(np.float64) ** 2)) > 1e-3   # not silence


@pytest.mark.parametrize("response_format", ["pcm", "wav", "mp3", "flac", "opus"])
def test_speech_create_every_format(client, response_format):
    reply = client.audio.speech.create(model="tts-1", voice="vivian", input=TEXT, response_format=response_format,
                                       extra_body={"sampling": SAMPLING, "seed": 7})
    check_audio(*decode(reply.content, response_format), exact=response_format in ("pcm", "wav", "flac"))


@pytest.mark.parametrize("response_format", ["pcm", "wav", "mp3", "flac", "opus"])
def test_streaming_response_every_format(client, response_format):
    with client.audio.speech.with_streaming_response.create(
            model="tiny", voice="serena", input=TEXT, response_format=response_format,
            extra_body={"sampling": SAMPLING, "seed": 7}) as reply:
        assert reply.headers["x-request-id"]
        chunks = list(reply.iter_bytes())
    if response_format in ("pcm", "wav", "opus"):
        assert reply.headers.get("transfer-encoding") == "chunked"
    check_audio(*decode(b"".join(chunks), response_format), exact=response_format in ("pcm", "wav", "flac"))


def test_the_seed_reaches_the_model(client):
    """Same seed, same codes: the audio matches to rounding (the vocoder's batch may differ between
    runs, moving a sample by an LSB); another seed gives other codes, audio far apart."""
    def make(seed: int) -> np.ndarray:
        return decode(client.audio.speech.create(model="tts-1", voice="vivian", input=TEXT, response_format="pcm",
                                                 extra_body={"sampling": SAMPLING, "seed": seed}).content, "pcm")[0]
    first, again, other = make(11), make(11), make(12)
    assert np.abs(first - again).max() <= 4 / 32768
    assert np.abs(first - other).max() > 0.01


def test_sse_events(client, stack):
    with httpx.stream("POST", f"{stack['http_url']}/v1/audio/speech", timeout=60, json={
            "model": "tts-1", "voice": "vivian", "input": TEXT, "response_format": "pcm", "stream_format": "sse",
            "sampling": SAMPLING}) as reply:
        assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/event-stream")
        events = [json.loads(line.removeprefix("data: ")) for line in reply.iter_lines() if line.startswith("data: ")]
    kinds = [e["type"] for e in events]
    assert kinds[-1] == "speech.audio.done" and set(kinds[:-1]) == {"speech.audio.delta"} and len(kinds) >= 2
    audio = b"".join(base64.b64decode(e["audio"]) for e in events[:-1])
    check_audio(*decode(audio, "pcm"))
    done = events[-1]
    assert done["usage"]["output_tokens"] == SAMPLING["max_frames"] and done["usage"]["input_tokens"] > 0
    assert done["summary"]["finish_reason"] == "max_frames"


def test_models_and_voices(client, stack):
    assert [m.id for m in client.models.list().data] == ["tiny"]
    voices = httpx.get(f"{stack['http_url']}/v1/audio/voices", timeout=10).json()
    assert voices["model_type"] == "custom_voice" and "vivian" in {v["id"] for v in voices["voices"]}
    assert "english" in voices["languages"]


def error_of(exc_info):
    return exc_info.value.status_code, exc_info.value.body


def test_errors_map_to_http_statuses(client):
    import openai
    with pytest.raises(openai.BadRequestError) as exc:
        client.audio.speech.create(model="tts-1", voice="nobody", input=TEXT)
    assert exc.value.status_code == 400 and "nobody" in exc.value.body["message"]
    assert exc.value.body["param"] == "config.speaker.name"
    with pytest.raises(openai.BadRequestError) as exc:
        client.audio.speech.create(model="tts-1", voice="vivian", input=TEXT, response_format="aac")
    assert "aac" in exc.value.body["message"] and "pcm" in exc.value.body["message"]
    with pytest.raises(openai.BadRequestError) as exc:
        client.audio.speech.create(model="no-such-model", voice="vivian", input=TEXT)
    assert exc.value.body["param"] == "model"
    with pytest.raises(openai.BadRequestError) as exc:
        client.audio.speech.create(model="tts-1", voice="vivian", input=TEXT, speed=3.0)
    assert "speed" in exc.value.body["message"]
    with pytest.raises(openai.APIStatusError) as exc:
        client.audio.speech.create(model="tts-1", voice="vivian", input="x" * 401)
    assert exc.value.status_code == 413
    with pytest.raises(openai.BadRequestError) as exc:
        client.audio.speech.create(model="tts-1", voice="vivian", input="   ")
    assert exc.value.body["param"] == "input"
    with pytest.raises(openai.BadRequestError) as exc:
        client.audio.speech.create(model="tts-1", voice="vivian", input=TEXT, extra_body={"sampling": {"nope": 1}})
    assert exc.value.body["param"] == "sampling.nope"


def test_malformed_bodies_are_400s(stack):
    url = f"{stack['http_url']}/v1/audio/speech"
    assert httpx.post(url, content=b"{not json", timeout=10).status_code == 400
    assert httpx.post(url, json=[1, 2], timeout=10).status_code == 400
    assert httpx.post(url, json={"input": 5, "voice": "vivian"}, timeout=10).json()["error"]["param"] == "input"


def test_overload_is_a_429_with_retry_after(tmp_path):
    """A gateway that admits one stream refuses a second at once with 429 and Retry-After."""
    launcher = http_stack(tmp_path, "--gateway-arg=--max-streams=1")
    try:
        url = launcher.wait_ready(130)["http_url"] + "/v1/audio/speech"
        body = {"voice": "vivian", "input": TEXT, "response_format": "pcm", "sampling": {"max_frames": 60}}

        async def both():
            async with httpx.AsyncClient(timeout=60) as http:
                async with http.stream("POST", url, json=body) as first:
                    assert first.status_code == 200
                    second = await http.post(url, json=body)
                    await first.aread()
                return second
        second = asyncio.run(asyncio.wait_for(both(), 90))
        assert second.status_code == 429 and second.headers["retry-after"] == "1"
        assert second.json()["error"]["type"] == "rate_limit_error"
    finally:
        launcher.stop(30)


def test_websocket_streams_text_in_and_audio_out(stack):
    from websockets.sync.client import connect
    ws_url = stack["http_url"].replace("http://", "ws://") + "/v1/audio/speech/stream"
    audio, events = b"", []
    with connect(ws_url, open_timeout=10, close_timeout=10) as ws:
        ws.send(json.dumps({"type": "config", "voice": "vivian", "response_format": "pcm",
                            "sampling": {"max_frames": 40}}))
        for word in TEXT.split(" "):
            ws.send(json.dumps({"type": "text", "text": word + " "}))
        ws.send(json.dumps({"type": "flush", "id": "f1"}))
        ws.send(json.dumps({"type": "end"}))
        for message in ws:   # ends when the server closes
            if isinstance(message, bytes):
                audio += message
                events.append("audio")
            else:
                events.append(json.loads(message))
    kinds = [e if e == "audio" else e["type"] for e in events]
    assert kinds[0] == "start" and kinds[-1] == "summary" and "audio" in kinds and "flush_ack" in kinds
    assert kinds.index("flush_ack") < len(kinds) - 1
    summary = events[-1]
    assert summary["num_frames"] > 0 and len(audio) == 2 * summary["num_frames"] * SAMPLES_PER_FRAME


def test_websocket_refusals_say_why(stack):
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect
    ws_url = stack["http_url"].replace("http://", "ws://") + "/v1/audio/speech/stream"
    for first, param in (({"type": "text", "text": "hi"}, "type"),
                         ({"type": "config", "voice": "vivian", "response_format": "mp3"}, "response_format")):
        with connect(ws_url, open_timeout=10) as ws:
            ws.send(json.dumps(first))
            reply = json.loads(ws.recv(timeout=30))
            assert reply["type"] == "error" and reply["status"] == 400 and reply["error"]["param"] == param
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv(timeout=30)
            assert closed.value.rcvd.code == 1008


def test_a_taken_http_port_is_one_line():
    import socket

    from process_support import dead_port
    from test_startup_errors import assert_one_line_error, gateway_args, run_module
    with dead_port() as talker_port, socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = run_module("gateway", *gateway_args(0, talker_port), "--http-host", "127.0.0.1", "--http-port",
                            str(port))
        assert_one_line_error(result, "gateway", f"HTTP port 127.0.0.1:{port} could not be bound", "in use")


def test_the_page_ships_in_the_wheel():
    """The Docker image installs a built wheel: the page's files must be package data."""
    import fnmatch
    import tomllib
    from pathlib import Path

    import gateway.http
    root = Path(gateway.http.__file__).parent
    globs = tomllib.loads((root.parents[1] / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"][
        "gateway.http"]
    files = sorted(p.relative_to(root).as_posix() for p in (root / "static").iterdir())
    assert files and all(any(fnmatch.fnmatch(f, g) for g in globs) for f in files), (files, globs)


@pytest.fixture(scope="module")
def base_stack(tmp_path_factory):
    from checkpoint.files import resolve_model_dir
    resolve_model_dir("tiny-base")
    work = tmp_path_factory.mktemp("http-base-stack")
    launcher = http_stack(work, "--model", "tiny-base")
    try:
        yield launcher.wait_ready(130)
    finally:
        launcher.stop(40)


def test_register_speak_and_delete_a_cloned_voice(base_stack):
    from test_clone_stack import reference_audio
    url = base_stack["http_url"]
    clip = io.BytesIO()
    soundfile.write(clip, reference_audio(), RATE_HZ, format="WAV", subtype="PCM_16")
    files = {"file": ("me.wav", clip.getvalue(), "audio/wav")}
    reply = httpx.post(f"{url}/v1/audio/voices", files=files, timeout=60,
                       data={"voice_id": "me", "reference_text": "Hello there, this is my voice."})
    assert reply.status_code == 201, reply.text
    assert reply.json()["id"] == "me" and not reply.json()["x_vector_only"]
    listed = httpx.get(f"{url}/v1/audio/voices", timeout=10).json()
    assert listed["model_type"] == "base" and [v["id"] for v in listed["voices"]] == ["me"]
    speech = httpx.post(f"{url}/v1/audio/speech", timeout=60, json={
        "voice": "me", "input": TEXT, "response_format": "pcm", "sampling": {"max_frames": 6}})
    assert speech.status_code == 200 and len(speech.content) == 2 * 6 * SAMPLES_PER_FRAME
    assert httpx.post(f"{url}/v1/audio/voices", files={"file": ("me.txt", b"x", "text/plain")},
                      data={"voice_id": "x"}, timeout=10).json()["error"]["param"] == "file"
    assert httpx.delete(f"{url}/v1/audio/voices/me", timeout=10).status_code == 200
    assert httpx.delete(f"{url}/v1/audio/voices/me", timeout=10).status_code == 404
    gone = httpx.post(f"{url}/v1/audio/speech", timeout=60, json={"voice": "me", "input": TEXT})
    assert gone.status_code == 400 and "me" in gone.json()["error"]["message"]
