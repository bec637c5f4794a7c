"""Turn reference audio (+ its transcript) into a reusable VoiceClonePrompt."""
from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np

from talker_service.voice.clone_prompt import VoiceClonePrompt
from talker_service.voice.codec_encoder import CodecEncoder
from talker_service.voice.reference_audio import ReferenceAudioLimits, resample_to_24k, validate_reference_audio
from talker_service.voice.speaker_encoder import SpeakerEncoder
from talker_service.voice.xvector import extract_x_vector

logger = logging.getLogger(__name__)

# The reference tokenizes the transcript wrapped in these markers and slices them off again.
_REF_TEXT_OPEN = "<|im_start|>assistant\n"
_REF_TEXT_CLOSE = "<|im_end|>\n"


def _token_ids(tokenizer: Any, text: str) -> list[int]:
    ids = tokenizer(text)["input_ids"]
    if hasattr(ids, "tolist"):
        ids = ids.tolist()
    if ids and isinstance(ids[0], list):   # a batch of one
        ids = ids[0]
    return [int(i) for i in ids]


def reference_text_ids(tokenizer: Any, ref_text: str) -> list[int]:
    """Bare token ids of the reference transcript, sliced exactly as the reference model does.

    The transcript is tokenized inside its chat markers and a fixed number of marker tokens is cut
    from each end. Text starting with a newline merges with the opening marker's newline into one
    token; the fixed slice then drops that newline, as in the reference (the words survive).
    """
    if ref_text is None or not ref_text.strip():
        raise ValueError("ref_text is empty; in-context cloning needs the transcript of the reference audio")
    open_ids = _token_ids(tokenizer, _REF_TEXT_OPEN)
    close_ids = _token_ids(tokenizer, _REF_TEXT_CLOSE)
    ids = _token_ids(tokenizer, _REF_TEXT_OPEN + ref_text + _REF_TEXT_CLOSE)
    num_open, num_close = len(open_ids), len(close_ids)
    # all but the opening marker's trailing newline must come out as tokens of their own
    if ids[:num_open - 1] != open_ids[:-1] or ids[-num_close:] != close_ids or len(ids) <= num_open + num_close:
        raise ValueError(
            "the text tokenizer does not keep the chat markers <|im_start|>/<|im_end|> as separate tokens; "
            "load the checkpoint's own Qwen2 tokenizer"
        )
    return ids[num_open:-num_close]


def build_clone_prompt(
    ref_audio: np.ndarray,
    sample_rate_hz: int,
    ref_text: str | None,
    speaker_encoder: SpeakerEncoder,
    codec_encoder: CodecEncoder | None,
    tokenizer: Any,
    x_vector_only: bool,
    *,
    limits: ReferenceAudioLimits = ReferenceAudioLimits(),
) -> VoiceClonePrompt:
    """x-vector (always) plus, in in-context mode, the reference codes and transcript ids.

    x_vector_only=True ignores ref_text and needs neither codec_encoder nor tokenizer. In-context
    mode (x_vector_only=False) needs all three: the transcript must match the audio, as the model
    continues speaking after it.
    """
    if speaker_encoder is None:
        raise ValueError("voice cloning needs a speaker encoder (a Base checkpoint)")
    if not x_vector_only:
        if ref_text is None or not ref_text.strip():
            raise ValueError(
                "ref_text is required for in-context cloning (x_vector_only=False); pass the transcript "
                "of the reference audio, or set x_vector_only=True"
            )
        if codec_encoder is None or tokenizer is None:
            raise ValueError("in-context cloning needs the codec encoder and the text tokenizer")
    started_s = time.perf_counter()
    audio = validate_reference_audio(ref_audio, sample_rate_hz, limits)
    audio_24k = resample_to_24k(audio, sample_rate_hz)
    x_vector = extract_x_vector(speaker_encoder, audio_24k)
    ref_codes = ref_text_ids = None
    if not x_vector_only:
        ref_text_ids = reference_text_ids(tokenizer, ref_text)
        ref_codes = codec_encoder.encode(audio_24k)
    prompt = VoiceClonePrompt(
        x_vector=x_vector,
        ref_codes=ref_codes,
        ref_text_ids=ref_text_ids,
        tts_model_type="base",
        tts_model_size=speaker_encoder.tts_model_size,
        ref_text=None if x_vector_only else ref_text,
    )
    logger.info(
        "built voice prompt from %.2f s of audio at %d Hz: %s, %d reference frames, %d text ids in %.0f ms",
        audio.shape[0] / sample_rate_hz, sample_rate_hz, "in-context" if prompt.icl_mode else "x-vector only",
        prompt.num_ref_frames, len(ref_text_ids or ()), (time.perf_counter() - started_s) * 1000,
    )
    return prompt
