"""SynthesisConfig -> everything a talker Start needs, with every default applied.

Each failure is an InvalidArgument naming the field (or NOT_FOUND for an unknown registered
voice), so a client can fix its request from the message alone.
"""
from __future__ import annotations

import logging
import math
import secrets
from dataclasses import dataclass, field

import grpc
import numpy as np

from gateway.audio_encoding import MAX_RATE_HZ, MIN_RATE_HZ, OPUS_RATES_HZ
from gateway.errors import InvalidArgument, RequestError
from gateway.model_info import NATIVE_SAMPLE_RATE_HZ, ModelInfo
from gateway.reference_audio import decode_reference_audio
from gateway.text_tokenizer import TextTokenizer
from protos.tts.internal.v1 import talker_pb2
from protos.tts.v1 import config_pb2, tts_pb2

logger = logging.getLogger(__name__)

_KIND_FOR_TYPE = {"speaker": "custom_voice", "design": "voice_design", "clone": "base", "registered_voice_id": "base"}
_VOICE_KINDS = {"speaker": tts_pb2.VOICE_KIND_SPEAKER, "design": tts_pb2.VOICE_KIND_DESIGN,
                "clone": tts_pb2.VOICE_KIND_CLONE, "registered_voice_id": tts_pb2.VOICE_KIND_REGISTERED}
_ENCODINGS = set(config_pb2.AudioEncoding.values())


@dataclass
class Resolved:
    model: ModelInfo
    voice_field: str                       # which SynthesisConfig.voice oneof is set
    voice: tts_pb2.ResolvedVoice
    language: str
    language_codec_id: int
    sampling: talker_pb2.Sampling          # max_frames 0 when the client left it unset (the talker's default)
    max_frames: int                        # the request's frame cap: explicit, else the model's default
    text_mode: int
    encoding: int
    sample_rate_hz: int
    speed: float
    speaker: talker_pb2.SpeakerVoice | None = None
    design: talker_pb2.DesignVoice | None = None
    clone_prompt: talker_pb2.VoicePrompt | None = None          # registered voice
    clone_audio: np.ndarray | None = None                       # per-request clone: [num_samples] 24 kHz
    clone_text_ids: list[int] = field(default_factory=list)
    clone_x_vector_only: bool = False

    def start_message(self, request_id: str) -> tts_pb2.SynthesisStart:
        return tts_pb2.SynthesisStart(
            request_id=request_id, model=self.model.name, voice=self.voice, language=self.language,
            audio_format=config_pb2.AudioFormat(encoding=self.encoding, sample_rate_hz=self.sample_rate_hz),
            seed=self.sampling.seed, text_mode=self.text_mode, speed=self.speed)


def _sampling(cfg: config_pb2.SynthesisConfig, model: ModelInfo) -> tuple[talker_pb2.Sampling, int]:
    """(the talker's Sampling, the request's frame cap)."""
    s, generation = cfg.sampling, model.generation
    get = lambda name, key: getattr(s, name) if s.HasField(name) else generation[key]  # noqa: E731
    out = talker_pb2.Sampling(
        seed=s.seed if s.HasField("seed") else secrets.randbits(63),
        do_sample=bool(get("do_sample", "do_sample")), temperature=float(get("temperature", "temperature")),
        top_k=int(get("top_k", "top_k")), top_p=float(get("top_p", "top_p")),
        repetition_penalty=float(get("repetition_penalty", "repetition_penalty")),
        subtalker_do_sample=bool(get("subtalker_do_sample", "subtalker_dosample")),
        subtalker_temperature=float(get("subtalker_temperature", "subtalker_temperature")),
        subtalker_top_k=int(get("subtalker_top_k", "subtalker_top_k")),
        subtalker_top_p=float(get("subtalker_top_p", "subtalker_top_p")),
        # unset: 0, the talker's own default (which its context may cap without an error)
        max_frames=s.max_frames if s.HasField("max_frames") else 0,
        min_frames=int(get("min_frames", "min_new_tokens")),
    )
    max_frames = int(get("max_frames", "max_new_tokens"))
    for name in ("temperature", "subtalker_temperature"):
        value = getattr(out, name)
        if not (math.isfinite(value) and value > 0):
            raise InvalidArgument(f"config.sampling.{name}", f"must be > 0, got {value}")
    for name in ("top_p", "subtalker_top_p"):
        value = getattr(out, name)
        if not (math.isfinite(value) and 0 < value <= 1):
            raise InvalidArgument(f"config.sampling.{name}", f"must be in (0, 1], got {value}")
    if not (math.isfinite(out.repetition_penalty) and out.repetition_penalty >= 1):
        raise InvalidArgument("config.sampling.repetition_penalty", f"must be >= 1, got {out.repetition_penalty}")
    if max_frames < 1:
        raise InvalidArgument("config.sampling.max_frames", "must be >= 1")
    if s.HasField("max_frames") and max_frames > model.max_positions:
        raise InvalidArgument("config.sampling.max_frames",
                              f"{max_frames} exceeds the limit of {model.max_positions} frames: the context of "
                              f"{model.name} ({model.max_positions} positions) holds the prompt and every frame; "
                              "leave it unset to let the text's length bound the audio")
    if out.min_frames > max_frames:
        raise InvalidArgument("config.sampling.min_frames",
                              f"{out.min_frames} exceeds max_frames {max_frames}")
    return out, max_frames


def _audio_format(cfg: config_pb2.SynthesisConfig) -> tuple[int, int]:
    encoding = cfg.audio_format.encoding or config_pb2.AUDIO_ENCODING_PCM16
    if encoding not in _ENCODINGS:
        raise InvalidArgument("config.audio_format.encoding", f"unknown audio encoding {encoding}")
    rate = cfg.audio_format.sample_rate_hz or NATIVE_SAMPLE_RATE_HZ
    if not MIN_RATE_HZ <= rate <= MAX_RATE_HZ:
        raise InvalidArgument("config.audio_format.sample_rate_hz",
                              f"{rate} Hz is out of range; accepted {MIN_RATE_HZ}..{MAX_RATE_HZ}")
    if encoding == config_pb2.AUDIO_ENCODING_OGG_OPUS and rate not in OPUS_RATES_HZ:
        raise InvalidArgument("config.audio_format.sample_rate_hz",
                              f"{rate} Hz is not an Opus rate; accepted {', '.join(map(str, OPUS_RATES_HZ))}")
    return encoding, rate


class Resolver:
    def __init__(self, model: ModelInfo, tokenizer: TextTokenizer, voices, min_reference_s: float,
                 max_reference_s: float) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.voices = voices
        self.min_reference_s = min_reference_s
        self.max_reference_s = max_reference_s

    @staticmethod
    def is_quick(cfg: config_pb2.SynthesisConfig) -> bool:
        """Whether resolve() is only lookups and a short instruct's tokens (~40 us: a speaker or a
        design); a clone decodes its reference audio and a registered voice reads the registry's
        files, work for a thread."""
        return cfg.WhichOneof("voice") in ("speaker", "design")

    def resolve(self, cfg: config_pb2.SynthesisConfig, is_unary: bool) -> Resolved:
        model = self.model
        if cfg.model and cfg.model != model.name:
            raise InvalidArgument("config.model", f"unknown model {cfg.model!r}; served: {model.name}")
        voice_field = cfg.WhichOneof("voice")
        if voice_field is None:
            raise InvalidArgument("config.voice", "no voice: set one of speaker, design, clone, registered_voice_id")
        if _KIND_FOR_TYPE[voice_field] != model.model_type:
            raise InvalidArgument(f"config.{voice_field}", f"a {voice_field} voice needs a "
                                  f"{_KIND_FOR_TYPE[voice_field]} model; {model.name} is {model.model_type}")
        language = (cfg.language or "auto").lower()
        if language not in model.languages:
            raise InvalidArgument("config.language", f"unknown language {cfg.language!r}; valid: {', '.join(model.languages)}")
        if not (cfg.speed == 0 or (math.isfinite(cfg.speed) and 0.5 <= cfg.speed <= 2.0)):
            raise InvalidArgument("config.speed", f"{cfg.speed} is out of range; accepted 0.5..2.0 (0 = 1.0)")
        if cfg.text_mode not in config_pb2.TextMode.values():
            raise InvalidArgument("config.text_mode", f"unknown text mode {cfg.text_mode}")
        encoding, rate = _audio_format(cfg)
        text_mode = cfg.text_mode
        if not text_mode:
            is_clone = voice_field in ("clone", "registered_voice_id")
            text_mode = (config_pb2.TEXT_MODE_STREAMING if (not is_unary or is_clone)
                         else config_pb2.TEXT_MODE_NON_STREAMING)
        sampling, max_frames = _sampling(cfg, model)
        out = Resolved(model=model, voice_field=voice_field, voice=tts_pb2.ResolvedVoice(kind=_VOICE_KINDS[voice_field]),
                       language=language, language_codec_id=0, sampling=sampling, max_frames=max_frames,
                       text_mode=text_mode, encoding=encoding, sample_rate_hz=rate, speed=cfg.speed or 1.0)
        speaker_name = ""
        if voice_field == "speaker":
            speaker_name = cfg.speaker.name.lower()
            if speaker_name not in model.speaker_ids:
                raise InvalidArgument("config.speaker.name", f"unknown speaker {cfg.speaker.name!r}; "
                                      f"valid: {', '.join(sorted(model.speaker_ids))}")
            instruct = cfg.speaker.instruct if model.supports_instruct else ""
            out.voice.name = speaker_name
            out.speaker = talker_pb2.SpeakerVoice(speaker_codec_id=model.speaker_ids[speaker_name],
                                                  speaker_name=speaker_name,
                                                  instruct_token_ids=self.tokenizer.instruct_ids(instruct))
        elif voice_field == "design":
            out.design = talker_pb2.DesignVoice(instruct_token_ids=self.tokenizer.instruct_ids(cfg.design.instruct))
        elif voice_field == "clone":
            clone = cfg.clone
            if not clone.x_vector_only and not clone.reference_text.strip():
                raise InvalidArgument("config.clone.reference_text", "required unless x_vector_only is true")
            out.clone_audio = decode_reference_audio(clone.reference_audio, "config.clone.reference_audio",
                                                     self.min_reference_s, self.max_reference_s)
            out.clone_x_vector_only = clone.x_vector_only
            out.clone_text_ids = [] if clone.x_vector_only else self.tokenizer.encode(clone.reference_text)
        else:
            voice_id = cfg.registered_voice_id
            record = self.voices.get(voice_id)
            if record is None:
                raise RequestError(grpc.StatusCode.NOT_FOUND,
                                   f"config.registered_voice_id: no registered voice {voice_id!r}")
            out.voice.name = voice_id
            out.clone_prompt = record.prompt
        out.language_codec_id = model.language_codec_id(language, speaker_name)
        return out
