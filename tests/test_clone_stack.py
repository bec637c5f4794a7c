"""Voice cloning through the three real processes (launcher, tiny Base checkpoint, CPU).

RegisterVoice (in-context) makes the talker encode the reference once (ENCODE_VOICE); a
StreamSynthesize with that voice id, and a per-request clone (x-vector only) in the config, must
give audio equal to the offline Synthesizer for the same seed and the same voice prompt (the
in-context reference frames prime the vocoder and are not part of the audio). The stored prompt
itself must equal the offline one. Errors: too-short audio is refused before any talker work.
"""
from __future__ import annotations


import grpc
import numpy as np
import pytest
import soundfile

from async_support import run
from checkpoint.files import resolve_model_dir
from client import TtsClient, make_config
from process_support import LauncherProcess
from protos.tts.internal.v1 import talker_pb2
from protos.tts.v1 import config_pb2
from test_vocoder_process_support import one_cpu_thread

pytestmark = pytest.mark.timeout(180)
SEED = 777
MAX_FRAMES = 10
REF_TEXT = "Hello there, this is my voice."
TEXT = "Say this clearly."
RUN_S = 90.0   # run()'s bound per call: a real stack on CPU encoding clips is slower than the fakes


def reference_audio(seconds: float = 2.0) -> np.ndarray:
    """A voiced-like clip at 24 kHz: harmonics with a slow envelope, deterministic."""
    t = np.arange(int(seconds * 24000)) / 24000
    tone = sum(np.sin(2 * np.pi * f0 * t + k) / (k + 1) for k, f0 in enumerate((140, 280, 420, 700)))
    return (0.2 * tone * (0.6 + 0.4 * np.sin(2 * np.pi * 1.5 * t))).astype(np.float32)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    resolve_model_dir("tiny-base")
    work = tmp_path_factory.mktemp("clone-stack")
    launcher = LauncherProcess(work, ["--model", "tiny-base", "--grpc-port", "0", "--health-timeout-s", "90",
                                      "--drain-grace-s", "2", "--vocoder-arg=--cpu-threads=1",
                                      "--talker-arg=--cpu-threads=1", f"--gateway-arg=--voices-dir={work / 'voices'}"])
    try:
        info = dict(launcher.wait_ready(100))
        info["work"] = work
        ref_path = work / "ref.wav"
        soundfile.write(ref_path, reference_audio(), 24000, subtype="FLOAT")   # float WAV at 24 kHz: no rounding
        info["ref_path"] = ref_path
        yield info
    finally:
        launcher.stop(40)


@pytest.fixture(scope="module")
def synth(stack):
    from talker_service.generate import Synthesizer
    with one_cpu_thread():
        yield Synthesizer.from_pretrained(resolve_model_dir("tiny-base"), max_slots=2, max_seq_len=512)


def offline_audio(synth, prompt) -> np.ndarray:
    """The gateway sends clone requests in streaming text mode, seeded, with max_frames frames."""
    sampling = synth.sampling_params(seed=SEED, max_new_tokens=MAX_FRAMES + 1)
    with one_cpu_thread():
        pcm, _ = synth.synthesize(TEXT, voice=prompt, sampling=sampling, non_streaming_mode=False)
    return pcm


def pcm_of(responses) -> np.ndarray:
    return np.frombuffer(b"".join(r.audio.audio for r in responses if r.HasField("audio")), "<f4")


def stream(stack, config: config_pb2.SynthesisConfig):
    async def body():
        async with TtsClient(stack["grpc_target"]) as client:
            return [r async for r in client.stream([TEXT], config, timeout_s=90)]
    return run(body(), RUN_S)


def cloned_config(**kw) -> config_pb2.SynthesisConfig:
    return make_config(encoding=config_pb2.AUDIO_ENCODING_FLOAT32, seed=SEED, max_frames=MAX_FRAMES, **kw)


def test_registered_in_context_voice_equals_offline(stack, synth):
    async def register():
        async with TtsClient(stack["grpc_target"]) as client:
            return await client.register_voice("icl-voice", stack["ref_path"], reference_text=REF_TEXT)

    voice = run(register(), RUN_S)
    assert voice.voice_id == "icl-voice" and not voice.x_vector_only
    with one_cpu_thread():
        want = synth.clone_voice(reference_audio(), 24000, REF_TEXT, x_vector_only=False)
    stored = talker_pb2.VoicePrompt.FromString((stack["work"] / "voices" / "icl-voice.pb").read_bytes())
    assert not stored.x_vector_only and stored.num_reference_frames == want.ref_codes.shape[0] > 0
    np.testing.assert_allclose(stored.speaker_embedding, want.x_vector.numpy(), atol=1e-5)
    assert np.array_equal(np.asarray(stored.reference_codes).reshape(-1, 16), want.ref_codes.numpy())
    assert list(stored.reference_text_token_ids) == list(want.ref_text_ids)

    responses = stream(stack, cloned_config(voice="id:icl-voice"))
    assert responses[0].HasField("start") and responses[-1].HasField("summary")
    got, expected = pcm_of(responses), offline_audio(synth, want)
    assert got.shape == expected.shape and got.size > 0
    np.testing.assert_allclose(got, expected, atol=1e-4)


def test_per_request_x_vector_clone_equals_offline(stack, synth):
    responses = stream(stack, cloned_config(reference_audio=stack["ref_path"]))   # no text: x-vector only
    with one_cpu_thread():
        want = synth.clone_voice(reference_audio(), 24000, x_vector_only=True)
    got, expected = pcm_of(responses), offline_audio(synth, want)
    assert responses[-1].HasField("summary") and got.shape == expected.shape and got.size > 0
    np.testing.assert_allclose(got, expected, atol=1e-4)


def test_per_request_in_context_clone_equals_offline(stack, synth):
    responses = stream(stack, cloned_config(reference_audio=stack["ref_path"], reference_text=REF_TEXT))
    with one_cpu_thread():
        want = synth.clone_voice(reference_audio(), 24000, REF_TEXT, x_vector_only=False)
    got, expected = pcm_of(responses), offline_audio(synth, want)
    assert got.shape == expected.shape and got.size > 0
    np.testing.assert_allclose(got, expected, atol=1e-4)


def test_too_short_reference_is_refused(stack, tmp_path):
    short = tmp_path / "short.wav"
    soundfile.write(short, reference_audio(0.3), 24000, subtype="FLOAT")

    async def register():
        async with TtsClient(stack["grpc_target"]) as client:
            await client.register_voice("short", short, reference_text=REF_TEXT)

    with pytest.raises(grpc.aio.AioRpcError) as error:
        run(register(), RUN_S)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
