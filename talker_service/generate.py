"""Offline generate API: text + voice -> codes -> audio, usable without the services.

    synth = Synthesizer.from_pretrained("path/to/Qwen3-TTS-12Hz-1.7B-CustomVoice", device="cuda")
    pcm, sample_rate_hz = synth.synthesize("Hello.", voice="vivian", language="english")

`generate_codes` batches several requests through shared decode steps (BatchRunner); prompt
building follows the official model exactly (talker_service.prompt), so greedy decoding gives
the official codes.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from checkpoint.configs import generation_config as default_generation_config
from talker_service.generate_batch import BatchRunner, Finished
from talker_service.model import SamplingParams, TalkerModel
from talker_service.model.loader import resolve_checkpoint_dir
from talker_service.prompt import (DEFAULT_NON_STREAMING_MODE, PromptRequest, PromptVocab, TextFeed, new_text_feed,
                                   tokenize_instruct, tokenize_target, validate_request)

logger = logging.getLogger(__name__)

SAMPLE_RATE_HZ = 24000
SAMPLES_PER_FRAME = 1920


@dataclass
class SynthesisRequest:
    text: str | None = None
    voice: object = None                    # CustomVoice speaker name, or a VoiceClonePrompt (Base)
    language: str = "auto"
    instruct: str | None = None             # VoiceDesign description / 1.7B CustomVoice style
    sampling: SamplingParams | None = None  # None: the checkpoint's generation_config.json
    non_streaming_mode: bool | None = None  # None: the official default for the model type
    text_ids: list[int] | None = None       # bare token ids instead of `text`
    instruct_ids: list[int] | None = None   # ids of the wrapped instruction instead of `instruct`


class Synthesizer:
    def __init__(self, model_dir: Path, talker: TalkerModel, config: dict, generation_config: dict,
                 max_text_tokens: int = 2048):
        self.model_dir = model_dir
        self.talker = talker
        self.vocab = PromptVocab.from_config(config)
        self.generation_config = generation_config
        self.max_text_tokens = max_text_tokens
        self._tokenizer = None
        self._decoder = None
        self._voice_encoders = None

    @classmethod
    def from_pretrained(cls, model: str | Path, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
                        max_slots: int = 4, max_seq_len: int = 4096, max_text_tokens: int = 2048) -> "Synthesizer":
        model_dir = resolve_checkpoint_dir(model)
        config = json.loads((model_dir / "config.json").read_text())
        talker = TalkerModel.from_checkpoint(model_dir, device=device, dtype=dtype, max_slots=max_slots,
                                             max_seq_len=max_seq_len)
        generation_path = model_dir / "generation_config.json"
        if generation_path.is_file():
            generation = json.loads(generation_path.read_text())
        else:   # the official wrapper's hard defaults
            generation = default_generation_config() | {"max_new_tokens": 2048}
        return cls(model_dir, talker, config, generation, max_text_tokens=max_text_tokens)

    # ---- lazily loaded parts (only the paths that need them pay for them) ------------------
    @property
    def tokenizer(self):
        if self._tokenizer is None:
            from checkpoint.text_tokenizer import load_text_tokenizer
            self._tokenizer = load_text_tokenizer(self.model_dir)
        return self._tokenizer

    @property
    def decoder(self):
        if self._decoder is None:
            from vocoder_service.codec import Code2Wav
            self._decoder = Code2Wav.from_pretrained(self.model_dir, device=self.talker.device)
        return self._decoder

    def sampling_params(self, **overrides) -> SamplingParams:
        """Official precedence: explicit value > generation_config.json > hard default."""
        return SamplingParams.from_generation_config(self.generation_config, **overrides)

    # ---- request -> prompt ----------------------------------------------------------------
    def prepare(self, request: SynthesisRequest) -> tuple[PromptRequest, TextFeed, SamplingParams]:
        """Validate and tokenize; the returned feed is open (push more text, then close())."""
        voice = request.voice
        speaker = voice if isinstance(voice, str) else None
        clone = None if voice is None or isinstance(voice, str) else voice
        if clone is not None and hasattr(clone, "check_hidden_size"):
            clone.check_hidden_size(self.talker.config.hidden_size)
        if request.text is not None and request.text_ids is not None:
            raise ValueError("give text or text_ids, not both")
        role_ids, text_ids = None, request.text_ids
        if request.text is not None:
            target = tokenize_target(self.tokenizer, request.text, expected_role_ids=self.vocab.role_ids)
            role_ids, text_ids = target.role_ids, target.text_ids
        if not text_ids:
            raise ValueError("text is empty: nothing to synthesize")
        if len(text_ids) > self.max_text_tokens:
            raise ValueError(f"text has {len(text_ids)} tokens, more than the limit of {self.max_text_tokens}")
        instruct_ids = request.instruct_ids
        if request.instruct:
            instruct_ids = tokenize_instruct(self.tokenizer, request.instruct)
        non_streaming = request.non_streaming_mode
        if non_streaming is None:
            non_streaming = DEFAULT_NON_STREAMING_MODE[self.vocab.model_type]
        prompt = PromptRequest(language=request.language, speaker=speaker, instruct_ids=instruct_ids, clone=clone,
                               non_streaming_mode=non_streaming, role_ids=role_ids)
        validate_request(self.vocab, prompt)
        feed = new_text_feed(self.vocab, prompt, max_text_tokens=self.max_text_tokens)
        feed.push(text_ids)
        return prompt, feed, request.sampling or self.sampling_params()

    # ---- generation -----------------------------------------------------------------------
    def generate(self, requests: list[SynthesisRequest]) -> list[Finished]:
        runner = BatchRunner(self.talker, self.vocab)
        for index, request in enumerate(requests):
            prompt, feed, sampling = self.prepare(request)
            feed.close()
            runner.submit(index, prompt, feed, sampling)
        while runner.has_work:
            if not runner.step():
                raise RuntimeError("no request could advance (all waiting for text)")
        return [runner.finished[i] for i in range(len(requests))]

    def generate_codes(self, requests: list[SynthesisRequest]) -> list[torch.Tensor]:
        """Codes [n, 16] int64 per request, generated together in shared decode steps."""
        return [f.codes for f in self.generate(requests)]

    def decode(self, codes: torch.Tensor, voice: object = None) -> np.ndarray:
        """pcm float32 [n * 1920]. In-context clones decode behind their reference codes (the
        decoder's left context, as the official output is made) and drop that part."""
        ref = getattr(voice, "ref_codes", None)
        if codes.shape[0] == 0:
            return np.zeros(0, dtype=np.float32)
        full = codes if ref is None else torch.cat([ref.to(codes), codes])   # [K + n, 16]
        pcm = self.decoder.decode(full.T[None].to(self.talker.device))[0]     # [(K + n) * 1920]
        skip = 0 if ref is None else ref.shape[0] * SAMPLES_PER_FRAME
        return pcm[skip:].float().cpu().numpy()

    def synthesize(self, text: str, voice: object = None, language: str = "auto", instruct: str | None = None,
                   sampling: SamplingParams | None = None, non_streaming_mode: bool | None = None
                   ) -> tuple[np.ndarray, int]:
        request = SynthesisRequest(text=text, voice=voice, language=language, instruct=instruct, sampling=sampling,
                                   non_streaming_mode=non_streaming_mode)
        codes = self.generate_codes([request])[0]
        return self.decode(codes, voice), SAMPLE_RATE_HZ

    # ---- voice cloning (Base) ---------------------------------------------------------------
    def clone_voice(self, ref_audio: np.ndarray, sample_rate_hz: int, ref_text: str | None = None,
                    x_vector_only: bool = False):
        """A reusable VoiceClonePrompt from reference audio (+ transcript for in-context mode)."""
        if self.vocab.model_type != "base":
            raise ValueError(f"voice cloning needs a Base model; this is a {self.vocab.model_type} model")
        from talker_service.voice.builder import build_clone_prompt
        if self._voice_encoders is None:
            from talker_service.voice.codec_encoder import load_codec_encoder
            from talker_service.voice.xvector import load_speaker_encoder
            device, dtype = self.talker.device, self.talker.dtype
            self._voice_encoders = (load_speaker_encoder(self.model_dir, device, dtype),
                                    load_codec_encoder(self.model_dir, device, dtype))
        speaker_encoder, codec_encoder = self._voice_encoders
        return build_clone_prompt(ref_audio, sample_rate_hz, ref_text, speaker_encoder, codec_encoder,
                                  None if x_vector_only else self.tokenizer, x_vector_only)
