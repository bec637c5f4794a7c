"""`POST /v1/audio/speech` bodies (the OpenAI shape plus this project's extras) -> a SynthesisConfig.

OpenAI fields: model, input, voice (a name, or {"id": ...}), instructions, response_format, speed,
stream_format. Extras, under names OpenAI does not use: language, seed, sampling (the
SamplingParams fields: temperature, top_k, top_p, repetition_penalty, max_frames, min_frames, ...).

How `voice` and `instructions` map depends on the served model's type:
  - CustomVoice: voice = a speaker name, instructions = how that speaker should speak;
  - VoiceDesign: instructions = the voice described in words (required); voice is not used;
  - Base: voice = a voice registered earlier (RegisterVoice, or the page's upload).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from gateway.http.errors import HttpError
from gateway.http.formats import FORMATS, OutputFormat
from protos.tts.v1 import config_pb2, voices_pb2

# Names OpenAI clients send that mean "the default model here".
OPENAI_MODEL_ALIASES = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts")
STREAM_FORMATS = ("audio", "sse")
_SAMPLING_FIELDS = {f.name: f for f in config_pb2.SamplingParams.DESCRIPTOR.fields}
SPEECH_FIELDS = {"model", "input", "voice", "instructions", "response_format", "speed", "stream_format", "language",
          "seed", "sampling"}


@dataclass
class SpeechRequest:
    text: str
    config: config_pb2.SynthesisConfig
    output: OutputFormat
    stream_format: str


def _string(body: dict, name: str, default: str = "") -> str:
    value = body.get(name, default)
    if value is None:
        return default
    if not isinstance(value, str):
        raise HttpError(400, f"{name}: expected a string, got {type(value).__name__}", name)
    return value


def _number(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise HttpError(400, f"{name}: expected a finite number, got {value!r}", name)
    return float(value)


def _voice_name(body: dict) -> str:
    voice = body.get("voice", "")
    if isinstance(voice, dict):  # the newer OpenAI form {"id": "..."}
        voice = voice.get("id", "")
    if voice is None:
        return ""
    if not isinstance(voice, str):
        raise HttpError(400, f"voice: expected a name or {{\"id\": name}}, got {type(voice).__name__}", "voice")
    return voice


def _sampling(body: dict) -> config_pb2.SamplingParams:
    params = config_pb2.SamplingParams()
    if "seed" in body and body["seed"] is not None:
        seed = body["seed"]
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2 ** 64:
            raise HttpError(400, f"seed: expected an integer in [0, 2^64), got {seed!r}", "seed")
        params.seed = seed
    given = body.get("sampling") or {}
    if not isinstance(given, dict):
        raise HttpError(400, "sampling: expected an object", "sampling")
    for name, value in given.items():
        field = _SAMPLING_FIELDS.get(name)
        if field is None or name == "seed":
            raise HttpError(400, f"sampling.{name}: unknown field; accepted: "
                            f"{', '.join(n for n in _SAMPLING_FIELDS if n != 'seed')}", f"sampling.{name}")
        if field.type == field.TYPE_BOOL:
            if not isinstance(value, bool):
                raise HttpError(400, f"sampling.{name}: expected true or false", f"sampling.{name}")
        elif field.type == field.TYPE_FLOAT:
            value = _number(value, f"sampling.{name}")
        elif isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise HttpError(400, f"sampling.{name}: expected a non-negative integer, got {value!r}", f"sampling.{name}")
        setattr(params, name, value)
    return params


def parse_speech_request(body, model: voices_pb2.ModelVoices, max_text_chars: int) -> SpeechRequest:
    """Validate `body` (decoded JSON) against the served `model`; HttpError names the bad field."""
    if not isinstance(body, dict):
        raise HttpError(400, "the request body must be a JSON object")
    text = _string(body, "input")
    if not text.strip():
        raise HttpError(400, "input: empty text: nothing to synthesize", "input")
    if len(text) > max_text_chars:
        raise HttpError(413, f"input: text of {len(text)} characters is over the limit of {max_text_chars}", "input")
    stream_format = _string(body, "stream_format", "audio").lower()
    if stream_format not in STREAM_FORMATS:
        raise HttpError(400, f"stream_format: {stream_format!r} is not supported; supported: "
                        f"{', '.join(STREAM_FORMATS)}", "stream_format")
    config, output = parse_config(body, model, FORMATS, "mp3", config_pb2.TEXT_MODE_NON_STREAMING, SPEECH_FIELDS)
    return SpeechRequest(text=text, config=config, output=output, stream_format=stream_format)


def parse_config(body: dict, model: voices_pb2.ModelVoices, formats: dict[str, OutputFormat], default_format: str,
                 text_mode: int, known: set[str]) -> tuple[config_pb2.SynthesisConfig, OutputFormat]:
    """The SynthesisConfig of a request body (every field but the text) and its output format."""
    unknown = sorted(set(body) - known)
    if unknown:
        raise HttpError(400, f"{unknown[0]}: unknown field; accepted: {', '.join(sorted(known))}", unknown[0])
    model_name = _string(body, "model")
    if model_name and model_name != model.model and model_name not in OPENAI_MODEL_ALIASES:
        raise HttpError(400, f"model: unknown model {model_name!r}; served: {model.model} "
                        f"(or {', '.join(OPENAI_MODEL_ALIASES)} for it)", "model")
    format_name = _string(body, "response_format", default_format).lower()
    if format_name not in formats:
        raise HttpError(400, f"response_format: {format_name!r} is not supported; supported: {', '.join(formats)}",
                        "response_format")
    speed = _number(body["speed"], "speed") if body.get("speed") is not None else 1.0
    output = formats[format_name]
    config = config_pb2.SynthesisConfig(
        model=model.model, language=_string(body, "language", "auto") or "auto", speed=speed,
        audio_format=config_pb2.AudioFormat(encoding=output.grpc_encoding, sample_rate_hz=output.sample_rate_hz),
        sampling=_sampling(body), text_mode=text_mode)
    set_voice(config, model, _voice_name(body), _string(body, "instructions"))
    return config, output


def set_voice(config: config_pb2.SynthesisConfig, model: voices_pb2.ModelVoices, voice: str, instructions: str) -> None:
    """Fill the config's voice from an OpenAI-style voice name and instructions (see the module doc)."""
    if model.model_type == voices_pb2.MODEL_TYPE_CUSTOM_VOICE:
        if not voice:
            raise HttpError(400, f"voice: required; speakers: {', '.join(s.name for s in model.speakers)}", "voice")
        config.speaker.CopyFrom(config_pb2.SpeakerVoice(name=voice, instruct=instructions))
    elif model.model_type == voices_pb2.MODEL_TYPE_VOICE_DESIGN:
        if not instructions.strip():
            raise HttpError(400, "instructions: required for a VoiceDesign model: describe the voice in words",
                            "instructions")
        config.design.CopyFrom(config_pb2.DesignVoice(instruct=instructions))
    else:
        if not voice:
            raise HttpError(400, "voice: required: the id of a registered voice (GET /v1/audio/voices)", "voice")
        config.registered_voice_id = voice
