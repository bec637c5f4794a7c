"""Start (tts.internal.v1) -> what the engine takes: PromptRequest, open TextFeed, SamplingParams.

The gateway resolved names to codec ids; the prompt builder speaks names, so ids are mapped back
through the checkpoint's own tables. A dialect language id is reached through its speaker (the
prompt builder applies the substitution itself), so it maps back to "chinese".
"""
from __future__ import annotations

import numpy as np
import torch

from protos.tts.internal.v1 import talker_pb2
from protos.tts.v1 import config_pb2
from talker_service.engine import EngineError
from talker_service.model import SamplingParams
from talker_service.prompt import DEFAULT_NON_STREAMING_MODE, PromptRequest, PromptVocab, TextFeed, new_text_feed
from talker_service.voice.clone_prompt import VoiceClonePrompt


class StartReader:
    def __init__(self, vocab: PromptVocab, hidden_size: int, default_max_new_tokens: int, max_text_tokens: int,
                 max_seq_len: int = 0):
        self.vocab = vocab
        self.hidden_size = hidden_size
        self.default_max_new_tokens = default_max_new_tokens
        self.max_text_tokens = max_text_tokens
        self.max_seq_len = max_seq_len      # positions per slot (prompt plus frames); 0: no check here
        self.speaker_names = {int(i): name for name, i in vocab.ids.speaker_ids.items()}
        self.language_names = {int(i): ("chinese" if "dialect" in name else name)
                               for name, i in vocab.ids.language_ids.items()}

    def read(self, start: talker_pb2.Start) -> tuple[PromptRequest, TextFeed, SamplingParams, np.ndarray | None]:
        """(prompt, feed holding the leading text, sampling, context codes [K, 16] or None).
        EngineError INVALID_ARGUMENT naming the field."""
        try:
            prompt, context = self._prompt(start)
            feed = new_text_feed(self.vocab, prompt, max_text_tokens=self.max_text_tokens)
            feed.push(start.text_token_ids)
            if start.is_text_complete:
                feed.close()
            return prompt, feed, self._sampling(start.sampling), context
        except ValueError as exc:
            raise EngineError("INVALID_ARGUMENT", f"request {start.request_id!r}: {exc}") from None

    def _prompt(self, start: talker_pb2.Start) -> tuple[PromptRequest, np.ndarray | None]:
        language = "auto"
        if start.language_codec_id:
            if start.language_codec_id not in self.language_names:
                raise ValueError(f"language_codec_id {start.language_codec_id} is not a language of this model")
            language = self.language_names[start.language_codec_id]
        speaker, instruct_ids, clone, context = None, None, None, None
        voice = start.WhichOneof("voice")
        if voice == "speaker":
            if start.speaker.speaker_codec_id not in self.speaker_names:
                raise ValueError(f"speaker.speaker_codec_id {start.speaker.speaker_codec_id} is not a speaker "
                                 "of this model")
            speaker = self.speaker_names[start.speaker.speaker_codec_id]
            instruct_ids = list(start.speaker.instruct_token_ids) or None
        elif voice == "design":
            instruct_ids = list(start.design.instruct_token_ids) or None
        elif voice == "clone":
            clone, context = self._clone(start.clone)
        if start.text_mode == config_pb2.TEXT_MODE_UNSPECIFIED:
            non_streaming = DEFAULT_NON_STREAMING_MODE[self.vocab.model_type]
        else:
            non_streaming = start.text_mode == config_pb2.TEXT_MODE_NON_STREAMING
        return PromptRequest(language=language, speaker=speaker, instruct_ids=instruct_ids, clone=clone,
                             non_streaming_mode=non_streaming), context

    def _clone(self, voice: talker_pb2.VoicePrompt) -> tuple[VoiceClonePrompt, np.ndarray | None]:
        codes = None
        if not voice.x_vector_only:
            n = voice.num_reference_frames
            if len(voice.reference_codes) != n * 16 or n == 0:
                raise ValueError(f"clone.reference_codes has {len(voice.reference_codes)} values; "
                                 f"num_reference_frames {n} x 16 = {n * 16} (and > 0 for in-context cloning)")
            codes = np.asarray(voice.reference_codes, dtype=np.int64).reshape(n, 16)   # [K, 16]
        prompt = VoiceClonePrompt(
            x_vector=torch.tensor(list(voice.speaker_embedding), dtype=torch.float32),
            ref_codes=None if codes is None else torch.from_numpy(codes),
            ref_text_ids=None if codes is None else list(voice.reference_text_token_ids))
        prompt.check_hidden_size(self.hidden_size, "this talker")
        return prompt, codes

    def _sampling(self, s: talker_pb2.Sampling) -> SamplingParams:
        # An explicit max_frames the context cannot hold is a mistake to report, not a silent cap
        # (the gateway checks the model's own context; this talker's max_seq_len may be smaller).
        if self.max_seq_len and s.max_frames > self.max_seq_len:
            raise ValueError(f"sampling.max_frames {s.max_frames} exceeds the context of this talker: "
                             f"{self.max_seq_len} positions (max_seq_len) hold the prompt and every frame")
        # max_frames counts frames; the official max_new_tokens counts one more (the EOS sampling)
        max_new_tokens = s.max_frames + 1 if s.max_frames else self.default_max_new_tokens
        # EOS is masked while fewer than min_new_tokens codes were sampled: that many frames at least
        min_new_tokens = {"min_new_tokens": s.min_frames} if s.HasField("min_frames") else {}
        if s.HasField("min_frames") and s.min_frames >= max_new_tokens:
            raise ValueError(f"sampling.min_frames {s.min_frames} exceeds max_frames {max_new_tokens - 1}")
        return SamplingParams(
            seed=s.seed, do_sample=s.do_sample, temperature=s.temperature, top_k=s.top_k, top_p=s.top_p,
            repetition_penalty=s.repetition_penalty, subtalker_dosample=s.subtalker_do_sample,
            subtalker_temperature=s.subtalker_temperature, subtalker_top_k=s.subtalker_top_k,
            subtalker_top_p=s.subtalker_top_p, max_new_tokens=max_new_tokens, **min_new_tokens)
