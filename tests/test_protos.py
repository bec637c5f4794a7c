"""The wire contracts: generated code is fresh, the schema follows its conventions, messages
round-trip, and the ZeroMQ codec rejects every malformed input with a clear ValueError."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import grpc
import numpy as np
import pytest
import zmq
from google.protobuf import descriptor_pb2, json_format

from protos import generate, status, wire
from protos.tts.internal.v1 import admin_pb2, common_pb2, talker_pb2, vocoder_pb2
from protos.tts.v1 import config_pb2, tts_pb2, tts_pb2_grpc, voices_pb2

ROOT = generate.REPO_ROOT
MT = wire.MessageType


# ---- generated code ----------------------------------------------------------------------------

def test_generated_code_is_fresh():
    problems = generate.stale_files()
    committed = (ROOT / "protos/tts/v1/tts_pb2_grpc.py").read_text()
    made_with = re.search(r"GRPC_GENERATED_VERSION = '([^']+)'", committed).group(1)
    assert not problems, (
        f"stale generated code (committed with grpcio-tools {made_with}, installed "
        f"{version('grpcio-tools')}); run `python -m protos.generate`:\n" + "\n".join(problems)
    )


def test_check_flags_edited_proto_orphans_and_missing_files(tmp_path):
    shutil.copytree(ROOT / "protos", tmp_path / "protos", ignore=shutil.ignore_patterns("__pycache__"))
    assert generate.stale_files(tmp_path) == []
    proto = tmp_path / "protos/tts/v1/config.proto"
    proto.write_text(proto.read_text().replace("string instruct = 1;", "string instruct = 1;\n  bool loud = 2;"))
    (tmp_path / "protos/tts/v1/old_pb2.py").write_text("")
    (tmp_path / "protos/tts/internal/v1/talker_pb2.pyi").unlink()
    (tmp_path / "protos/tts/internal/v1/__init__.py").unlink()
    problems = "\n".join(generate.stale_files(tmp_path))
    assert "protos/tts/v1/config_pb2.py: differs" in problems
    assert "protos/tts/v1/old_pb2.py: no longer generated" in problems
    assert "protos/tts/internal/v1/talker_pb2.pyi: missing" in problems
    assert "protos/tts/internal/v1/__init__.py: missing package marker" in problems
    cli = [sys.executable, "-m", "protos.generate", "--root", str(tmp_path)]
    assert subprocess.run([*cli, "--check"], cwd=ROOT, capture_output=True).returncode == 1
    assert subprocess.run(cli, cwd=ROOT, capture_output=True).returncode == 0  # rewrites in place
    assert generate.stale_files(tmp_path) == []
    assert not (tmp_path / "protos/tts/v1/old_pb2.py").exists()


# ---- schema conventions --------------------------------------------------------------------------

def _described_files(root: Path, out: Path) -> list[descriptor_pb2.FileDescriptorProto]:
    sources = [str(root / p) for p in generate.proto_sources(root)]
    generate.run_protoc(root, ["--include_source_info", f"--descriptor_set_out={out}", *sources])
    return list(descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file)


def _elements(f: descriptor_pb2.FileDescriptorProto):
    """(source path, name, descriptor) of every message, field, oneof, enum, value, service, method."""
    def enum(e, path):
        yield path, e.name, e
        for i, v in enumerate(e.value):
            yield (*path, 2, i), f"{e.name}.{v.name}", v

    def message(m, path):
        yield path, m.name, m
        for i, fld in enumerate(m.field):
            yield (*path, 2, i), f"{m.name}.{fld.name}", fld
        for i, o in enumerate(m.oneof_decl):
            if not any(fld.proto3_optional for fld in m.field if fld.HasField("oneof_index") and fld.oneof_index == i):
                yield (*path, 8, i), f"{m.name}.{o.name}", o
        for i, nested in enumerate(m.nested_type):
            if not nested.options.map_entry:
                yield from message(nested, (*path, 3, i))
        for i, e in enumerate(m.enum_type):
            yield from enum(e, (*path, 4, i))

    for i, m in enumerate(f.message_type):
        yield from message(m, (4, i))
    for i, e in enumerate(f.enum_type):
        yield from enum(e, (5, i))
    for i, s in enumerate(f.service):
        yield (6, i), s.name, s
        for j, meth in enumerate(s.method):
            yield (6, i, 2, j), f"{s.name}.{meth.name}", meth


# Directory -> package (first match). reflection/v1 is the standard gRPC reflection v1 API, which
# grpcio-reflection does not ship: its package is fixed by the protocol.
_PACKAGE_OF_DIR = (("protos/tts/internal/v1/", "tts.internal.v1"), ("protos/reflection/v1/", "grpc.reflection.v1"),
                   ("", "tts.v1"))


def _convention_problems(root: Path, tmp_path: Path) -> list[str]:
    """Package per directory, a comment on every element, enums prefixed and starting at *_UNSPECIFIED."""
    problems = []
    for f in _described_files(root, tmp_path / "set.pb"):
        package = next(pkg for prefix, pkg in _PACKAGE_OF_DIR if f.name.startswith(prefix))
        if f.package != package or f.syntax != "proto3":
            problems.append(f"{f.name}: package {f.package!r} ({f.syntax}), expected {package!r} (proto3)")
        commented = {
            tuple(loc.path) for loc in f.source_code_info.location
            if loc.leading_comments.strip() or loc.trailing_comments.strip()
        }
        problems += [f"{f.name}: no comment on {name}" for path, name, _ in _elements(f) if path not in commented]
        for _, name, desc in _elements(f):
            if isinstance(desc, descriptor_pb2.EnumDescriptorProto):
                prefix = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", desc.name).upper() + "_"
                if desc.value[0].number != 0 or desc.value[0].name != prefix + "UNSPECIFIED":
                    problems.append(f"{f.name}: {name} must start with {prefix}UNSPECIFIED = 0")
                problems += [f"{f.name}: {name}.{v.name} lacks prefix {prefix}"
                             for v in desc.value if not v.name.startswith(prefix)]
    return problems


def test_schema_conventions(tmp_path):
    assert _convention_problems(ROOT, tmp_path) == []
    # The check itself bites: an undocumented field and an enum without the convention.
    shutil.copytree(ROOT / "protos", tmp_path / "protos", ignore=shutil.ignore_patterns("__pycache__"))
    proto = tmp_path / "protos/tts/v1/voices.proto"
    proto.write_text(proto.read_text() + "\n// Doc.\nmessage Extra {\n  uint32 loudness_db = 1;\n}\n"
                     "// Doc.\nenum Color {\n  // Doc.\n  RED = 0;\n}\n")
    problems = _convention_problems(tmp_path, tmp_path)
    assert problems == [
        "protos/tts/v1/voices.proto: no comment on Extra.loudness_db",
        "protos/tts/v1/voices.proto: Color must start with COLOR_UNSPECIFIED = 0",
        "protos/tts/v1/voices.proto: Color.RED lacks prefix COLOR_",
    ], problems


def test_internal_status_codes_equal_grpc_numbers():
    for code in grpc.StatusCode:
        if code is grpc.StatusCode.OK:
            with pytest.raises(ValueError, match="OK"):
                status.from_grpc(code)
            continue
        internal = status.from_grpc(code)
        assert common_pb2.StatusCode.Name(internal) == f"STATUS_CODE_{code.name}"
        assert status.to_grpc(internal) is code
    assert status.to_grpc(common_pb2.STATUS_CODE_UNSPECIFIED) is grpc.StatusCode.UNKNOWN
    assert status.to_grpc(99) is grpc.StatusCode.UNKNOWN  # a newer peer's code


# ---- public API round trips ----------------------------------------------------------------------

def _clone_config() -> config_pb2.SynthesisConfig:
    return config_pb2.SynthesisConfig(
        model="qwen3-tts-1.7b-base",
        clone=config_pb2.CloneVoice(
            reference_audio=config_pb2.ReferenceAudio(
                data=b"\x00\x01" * 8, encoding=config_pb2.REFERENCE_AUDIO_ENCODING_PCM16, sample_rate_hz=16000),
            reference_text="hello there", x_vector_only=False),
        language="english",
        audio_format=config_pb2.AudioFormat(encoding=config_pb2.AUDIO_ENCODING_OGG_OPUS, sample_rate_hz=48000),
        speed=1.25,
        sampling=config_pb2.SamplingParams(seed=7, temperature=0.0, top_k=0, max_frames=300),
        text_mode=config_pb2.TEXT_MODE_STREAMING,
    )


def test_stream_messages_round_trip_and_keep_presence():
    requests = [
        tts_pb2.StreamSynthesizeRequest(config=_clone_config()),
        tts_pb2.StreamSynthesizeRequest(text="Hello, wor"),
        tts_pb2.StreamSynthesizeRequest(flush=tts_pb2.Flush(flush_id="f1")),
        tts_pb2.StreamSynthesizeRequest(end=tts_pb2.EndOfInput()),
    ]
    for msg in requests:
        back = tts_pb2.StreamSynthesizeRequest.FromString(msg.SerializeToString())
        assert back == msg and back.WhichOneof("request") == msg.WhichOneof("request")
    sampling = tts_pb2.StreamSynthesizeRequest.FromString(requests[0].SerializeToString()).config.sampling
    # Explicit zeros survive (temperature 0 is a value, not "use the default") ...
    assert sampling.HasField("temperature") and sampling.HasField("top_k") and sampling.seed == 7
    # ... and unset fields stay distinguishable from zero.
    assert not sampling.HasField("top_p") and not sampling.HasField("do_sample")
    summary = tts_pb2.StreamSynthesizeResponse(summary=tts_pb2.SynthesisSummary(
        audio_s=2.5, time_to_first_audio_ms=21.5, real_time_factor=0.05, num_frames=31,
        finish_reason=tts_pb2.FINISH_REASON_END_OF_SPEECH,
        timings=tts_pb2.ServerTimings(queue_ms=0.2, prefill_ms=6.0, first_frame_ms=9.5)))
    assert tts_pb2.StreamSynthesizeResponse.FromString(summary.SerializeToString()) == summary


def test_grpcurl_json_shape():
    # What a grpcurl user types with `-d @`: oneof members are plain keys, enums by name.
    msg = json_format.Parse(
        '{"config": {"speaker": {"name": "vivian", "instruct": "calm"}, "language": "auto",'
        ' "audioFormat": {"encoding": "AUDIO_ENCODING_WAV"}, "sampling": {"seed": "42"}}}',
        tts_pb2.StreamSynthesizeRequest())
    assert msg.config.WhichOneof("voice") == "speaker" and msg.config.speaker.name == "vivian"
    assert msg.config.audio_format.encoding == config_pb2.AUDIO_ENCODING_WAV and msg.config.sampling.seed == 42
    assert json_format.Parse('{"text": "Hi "}', tts_pb2.StreamSynthesizeRequest()).text == "Hi "
    registered = json_format.Parse('{"registeredVoiceId": "me"}', config_pb2.SynthesisConfig())
    assert registered.WhichOneof("voice") == "registered_voice_id"


def test_services_declare_the_calls_other_issues_use():
    methods = {m.name: (m.client_streaming, m.server_streaming)
               for m in tts_pb2.DESCRIPTOR.services_by_name["TextToSpeech"].methods}
    assert methods == {"StreamSynthesize": (True, True), "Synthesize": (False, False),
                       "ListVoices": (False, False), "RegisterVoice": (False, False), "DeleteVoice": (False, False)}
    talker = {m.name: m.server_streaming for m in admin_pb2.DESCRIPTOR.services_by_name["TalkerAdmin"].methods}
    vocoder = {m.name: m.server_streaming for m in admin_pb2.DESCRIPTOR.services_by_name["VocoderAdmin"].methods}
    assert talker == {"GetStats": False, "GenerateCodes": True} and vocoder == {"GetStats": False, "Decode": False}
    assert hasattr(tts_pb2_grpc, "add_TextToSpeechServicer_to_server")
    stats = admin_pb2.VocoderStats(batch_size_histogram={1: 10, 64: 3}, graphs=admin_pb2.GraphStats(hit_rate=0.97))
    assert dict(admin_pb2.VocoderStats.FromString(stats.SerializeToString()).batch_size_histogram) == {1: 10, 64: 3}
    voices = voices_pb2.ListVoicesResponse(models=[voices_pb2.ModelVoices(
        model="m", model_type=voices_pb2.MODEL_TYPE_CUSTOM_VOICE, speakers=[voices_pb2.Speaker(name="eric", dialect="sichuan_dialect")])])
    assert voices_pb2.ListVoicesResponse.FromString(voices.SerializeToString()) == voices


# ---- ZeroMQ codec ---------------------------------------------------------------------------------

def _sample(msg_type: MT):
    """A representative header (and array) per message type."""
    prompt = talker_pb2.VoicePrompt(model="m", speaker_embedding=[0.5, -1.0], reference_codes=list(range(32)),
                                    num_reference_frames=2, reference_text_token_ids=[9, 8])
    samples = {
        MT.START: (talker_pb2.Start(request_id="r1", reply_to="tcp://127.0.0.1:5557", clone=prompt,
                                    sampling=talker_pb2.Sampling(seed=1, temperature=0.9, max_frames=100),
                                    text_mode=config_pb2.TEXT_MODE_STREAMING, text_token_ids=[1, 2]), None),
        MT.TEXT: (talker_pb2.Text(request_id="r1", seq=3, token_ids=[5, 6, 7]), None),
        MT.END: (talker_pb2.End(request_id="r1", num_text_messages=4), None),
        MT.ENCODE_VOICE: (talker_pb2.EncodeVoice(request_id="v1", sample_rate_hz=24000),
                          np.linspace(-1, 1, 48, dtype=np.float32)),
        MT.ABORT: (common_pb2.Abort(request_id="r1", reason=common_pb2.STATUS_CODE_CANCELLED), None),
        MT.ACK: (talker_pb2.Ack(request_id="r1", talker_id="t0", vocoder_id="v0", num_prompt_tokens=12), None),
        MT.VOICE_ENCODED: (talker_pb2.VoiceEncoded(request_id="v1", prompt=prompt, encode_ms=3.5), None),
        MT.FRAMES: (vocoder_pb2.FramesChunk(
            talker_id="t0",
            opens=[vocoder_pb2.FramesOpen(handle=1, request_id="a", reply_to="tcp://127.0.0.1:5557",
                                          num_context_frames=2)],
            closes=[vocoder_pb2.FramesClose(handle=7, summary=vocoder_pb2.GenerationSummary(num_frames=40))]),
            wire.FramesArrays(wire.frames_entries([1, 7], [0, 5], [3, 1]), np.arange(64, dtype=np.int16).reshape(4, 16))),
        MT.PCM: (vocoder_pb2.PcmBatch(sample_rate_hz=24000, request_ids=["a", "b"], finals=[
            vocoder_pb2.PcmFinal(chunk_index=1, generation=vocoder_pb2.GenerationSummary(num_frames=3))]),
            wire.PcmArrays(np.array([[0, 0, 1920, 1, 500, 2500, 2, 1], [2, 3840, 0, 0, 0, 0, 0, 0]], np.uint64),
                           np.sin(np.arange(1920, dtype=np.float32)))),
        MT.ERROR: (common_pb2.Error(request_id="r1", code=common_pb2.STATUS_CODE_RESOURCE_EXHAUSTED,
                                    message="no free slot"), None),
        MT.HEARTBEAT: (common_pb2.Heartbeat(peer_id="v0", role=common_pb2.PEER_ROLE_VOCODER, incarnation=99,
                                            load=common_pb2.Load(num_slots_total=64, num_slots_used=3)), None),
    }
    assert set(samples) == set(MT) == set(wire.SCHEMAS), "every message type needs a schema and a sample"
    return samples[msg_type]


@pytest.mark.parametrize("msg_type", list(MT))
def test_every_message_type_round_trips(msg_type):
    header, array = _sample(msg_type)
    original = header.SerializeToString()
    frames = wire.encode(msg_type, header, array)
    assert header.SerializeToString() == original, "encode must not modify the caller's header"
    got_type, got_header, got_array = wire.decode(frames)
    assert got_type is msg_type
    if isinstance(array, tuple):   # a multi-array message: one frame per array, each described in header.arrays
        assert [list(spec.shape) for spec in got_header.arrays] == [list(a.shape) for a in array]
        got_header.ClearField("arrays")  # filled in by encode
        assert type(got_array) is type(array) and len(frames) == 2 + len(array)
        for got, sent in zip(got_array, array):
            np.testing.assert_array_equal(got, sent)
            assert got.dtype == sent.dtype and not got.flags.writeable
    elif array is not None:
        assert list(got_header.array.shape) == list(array.shape)
        got_header.ClearField("array")  # filled in by encode
    assert got_header == header
    if array is None:
        assert got_array is None and len(frames) == 2
    elif not isinstance(array, tuple):
        np.testing.assert_array_equal(got_array, array)
        assert got_array.dtype == array.dtype and not got_array.flags.writeable


def _one_entry(codes: np.ndarray) -> wire.FramesArrays:
    return wire.FramesArrays(wire.frames_entries([1], [0], [len(codes)]), codes)


def test_arrays_travel_zero_copy_and_in_any_layout():
    header = vocoder_pb2.FramesChunk(talker_id="t")
    codes = np.arange(48, dtype=np.int32).reshape(3, 16)
    frames = wire.encode(MT.FRAMES, header, _one_entry(codes))
    assert np.shares_memory(np.frombuffer(frames[3], dtype=np.int32), codes)  # no copy on send
    big_endian = codes.astype(">i4")
    transposed = np.ascontiguousarray(codes.T).T  # Fortran order
    for layout in (big_endian, transposed):
        np.testing.assert_array_equal(wire.decode(wire.encode(MT.FRAMES, header, _one_entry(layout)))[2].codes, codes)
    no_entries = wire.FramesArrays(np.zeros((0, 3), np.uint32), np.zeros((0, 16), np.int16))
    empty = wire.decode(wire.encode(MT.FRAMES, header, no_entries))[2]
    assert empty.codes.shape == (0, 16) and empty.handles.shape == (0,)
    voice = talker_pb2.EncodeVoice(request_id="v")
    audio = np.linspace(-1, 1, 8, dtype=np.float32)
    assert np.shares_memory(np.frombuffer(wire.encode(MT.ENCODE_VOICE, voice, audio)[2], np.float32), audio)


def test_round_trip_over_a_real_socket():
    ctx = zmq.Context.instance()
    push, pull = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    try:
        push.bind("inproc://test-protos-wire")
        pull.connect("inproc://test-protos-wire")
        header, pcm = _sample(MT.PCM)
        push.send_multipart(wire.encode(MT.PCM, header, pcm), copy=False)
        assert pull.poll(timeout=5000), "no message within 5 s"
        msg_type, got, array = wire.decode(pull.recv_multipart(copy=False))  # zmq.Frame objects
        assert msg_type is MT.PCM and list(got.request_ids) == ["a", "b"]
        for received, sent in zip(array, pcm):
            np.testing.assert_array_equal(received, sent)
    finally:
        push.close(linger=0)
        pull.close(linger=0)


@pytest.mark.parametrize("frames, match", [
    ([b"START"], "expected 2 or 3 frames"),
    ([b"START", b"", b"", b""], "expected 2 or 3 frames"),
    ([b"PCM", b"", b""], "PCM expects 4 frames \\(type, header, 2 arrays\\), got 3"),
    ([b"NOPE", b""], "unknown message type b'NOPE'"),
    ([b"START", b"\xff\xff\xff"], "malformed START header"),
    ([b"TEXT", b"", b"\x00\x00"], "TEXT carries no array"),
    ([b"FRAMES", b""], "FRAMES expects 4 frames"),
    ([b"ENCODE_VOICE", b""], "ENCODE_VOICE requires an array frame"),
    ([b"ENCODE_VOICE", b"", b"\x00" * 4], "header.array is unset"),
    ([b"START", 12345], "frame 1 is a int, not a buffer"),
])
def test_decode_rejects_malformed_frames(frames, match):
    with pytest.raises(ValueError, match=match):
        wire.decode(frames)


def _with_spec(msg_type: MT, dtype: int, shape: list[int], payload: bytes | None) -> list:
    header = wire.SCHEMAS[msg_type].header_class(array=common_pb2.ArraySpec(dtype=dtype, shape=shape))
    frames = [msg_type.value, header.SerializeToString()]
    return frames if payload is None else [*frames, payload]


@pytest.mark.parametrize("frames, match", [
    (_with_spec(MT.ENCODE_VOICE, common_pb2.DTYPE_FLOAT32, [16], b"\x00" * 63), "has 63 bytes; header says float32\\[16\\] = 64"),
    (_with_spec(MT.ENCODE_VOICE, common_pb2.DTYPE_FLOAT32, [16], b"\x00" * 65), "has 65 bytes"),
    (_with_spec(MT.ENCODE_VOICE, common_pb2.DTYPE_INT16, [32], b"\x00" * 64), "dtype int16; expected one of: float32"),
    (_with_spec(MT.ENCODE_VOICE, common_pb2.DTYPE_FLOAT32, [2, 8], b"\x00" * 64), "expected 1 dimensions"),
    (_with_spec(MT.ENCODE_VOICE, common_pb2.DTYPE_UNSPECIFIED, [4], b"\x00" * 16), "dtype 0 is not a known dtype"),
    (_with_spec(MT.ENCODE_VOICE, 77, [4], b"\x00" * 16), "dtype 77 is not a known dtype"),
    (_with_spec(MT.ENCODE_VOICE, common_pb2.DTYPE_FLOAT32, [4], None), "ENCODE_VOICE requires an array frame"),
    (_with_spec(MT.ENCODE_VOICE, common_pb2.DTYPE_FLOAT32, [2**62], b"\x00" * 16), "has 16 bytes"),
])
def test_decode_rejects_arrays_that_do_not_match_their_header(frames, match):
    with pytest.raises(ValueError, match=match):
        wire.decode(frames)


def test_encode_rejects_misuse():
    text = talker_pb2.Text(request_id="r")
    with pytest.raises(TypeError, match="TEXT needs a tts.internal.v1.Text header, got Start"):
        wire.encode(MT.TEXT, talker_pb2.Start())
    with pytest.raises(ValueError, match="TEXT carries no array"):
        wire.encode(MT.TEXT, text, np.zeros(3, np.float32))
    with pytest.raises(TypeError, match="FRAMES needs its 2 arrays as a FramesArrays"):
        wire.encode(MT.FRAMES, vocoder_pb2.FramesChunk())
    with pytest.raises(ValueError, match="ENCODE_VOICE requires an array"):
        wire.encode(MT.ENCODE_VOICE, talker_pb2.EncodeVoice())
    preset = talker_pb2.EncodeVoice(array=common_pb2.ArraySpec(dtype=common_pb2.DTYPE_FLOAT32, shape=[1]))
    with pytest.raises(ValueError, match="header.array is set by encode"):
        wire.encode(MT.ENCODE_VOICE, preset, np.zeros(1, np.float32))
    with pytest.raises(ValueError, match="dtype float64; expected one of: float32"):
        wire.encode(MT.ENCODE_VOICE, talker_pb2.EncodeVoice(), np.zeros(4))
    with pytest.raises(ValueError, match=r"shape \(4, 1\); expected 1 dimensions"):
        wire.encode(MT.ENCODE_VOICE, talker_pb2.EncodeVoice(), np.zeros((4, 1), np.float32))
    with pytest.raises(TypeError, match="ENCODE_VOICE array must be a numpy.ndarray, got list"):
        wire.encode(MT.ENCODE_VOICE, talker_pb2.EncodeVoice(), [0.0, 1.0])
    with pytest.raises(ValueError, match="is not a valid MessageType"):
        wire.encode(b"BOGUS", text)


def test_generated_servicers_are_abstract_bases():
    """A servicer missing a method fails at construction, naming it, instead of answering
    UNIMPLEMENTED in production; the generated modules carry no placeholder bodies."""
    from protos import generate
    from protos.tts.internal.v1 import admin_pb2_grpc
    from protos.tts.v1 import tts_pb2_grpc

    class HalfDone(tts_pb2_grpc.TextToSpeechServicer):
        def Synthesize(self, request, context):
            return None

    with pytest.raises(TypeError, match="StreamSynthesize"):
        HalfDone()
    with pytest.raises(TypeError, match="GetStats"):
        admin_pb2_grpc.VocoderAdminServicer()
    for path in generate.committed_generated():
        if path.name.endswith("_pb2_grpc.py"):
            assert "NotImplementedError" not in (generate.REPO_ROOT / path).read_text(), path
