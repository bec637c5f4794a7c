"""`qwen3-tts-say` against an in-process gateway and the fake talker: WAV out, streamed words."""
from __future__ import annotations

import asyncio

import numpy as np
import pytest
import soundfile

from test_gateway_support import FakeTalker, running_gateway, tokens_from_pcm
from checkpoint.files import resolve_model_dir
from client.cli import build_parser, say
from gateway.text_tokenizer import TextTokenizer

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("stream_text", [False, True])
def test_say_writes_the_wav(tmp_path, stream_text):
    model_dir = resolve_model_dir("tiny")
    talker = FakeTalker()
    out = tmp_path / "out.wav"
    text = "Hello there, general listener."

    async def body():
        async with running_gateway(model_dir, [talker.endpoint], tmp_path) as gw:
            argv = [text, "-o", str(out), "--target", f"127.0.0.1:{gw.port}", "--quiet", "--word-delay-s", "0"]
            return await say(build_parser().parse_args(argv + (["--stream-text"] if stream_text else [])))

    try:
        assert asyncio.run(asyncio.wait_for(body(), 30)) == 0
    finally:
        talker.close()
    pcm, rate = soundfile.read(out, dtype="float32")
    assert rate == 24000
    want = [i % 1000 for i in TextTokenizer.from_dir(model_dir).target_ids(text)]
    assert tokens_from_pcm(np.round(pcm * 32767) / 32767) == want
    (request,) = talker.requests.values()
    assert request.start.speaker.speaker_name == "aiden"  # the first listed speaker


def test_grpcurl_examples_parse_as_the_request_messages():
    from pathlib import Path

    from google.protobuf import json_format

    from protos.tts.v1 import tts_pb2
    examples = Path(__file__).resolve().parents[1] / "examples" / "grpcurl"
    lines = (examples / "stream.json").read_text().splitlines()
    kinds = [json_format.Parse(line, tts_pb2.StreamSynthesizeRequest()).WhichOneof("request") for line in lines]
    assert kinds[0] == "config" and kinds[-1] == "end"
    request = json_format.Parse((examples / "synthesize.json").read_text(), tts_pb2.SynthesizeRequest())
    assert request.config.speaker.name == "vivian" and request.text
