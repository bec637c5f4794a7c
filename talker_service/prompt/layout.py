"""Prompt layout as id tracks: which text id and which codec input sit at each prefill position.

Every talker input position is a text-track vector plus a codec-track vector; only the
instruction and role positions are text-only. Keeping the layout as plain ids (no tensors) makes
it cheap to build on the request path, easy to test against the official op order, and lets the
embedding run as a few batched lookups (see embed.py).

Official order (modeling_qwen3_tts.generate / generate_icl_prompt):
  [instruct ids: T]  [role x3: T]  [control ids (+ speaker slot): PAD_T + C]  [BOS_T + C(pad)]
  then by mode, with S = the feed's prefill text ids (reference ids, text, eos, maybe pads):
    dual-track, no ICL:   T(t1) + C(bos)
    non-streaming no ICL: T(S_k) + C(pad) for all k, then PAD_T + C(bos)
    dual-track ICL:       T(S_j) + CT_j            with CT = [C(bos), F1..FK], len(S) == K+1
    non-streaming ICL:    T(S_j) + C(pad) for all j, then PAD_T + CT_k for every k
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .vocab import PromptVocab

NO_TEXT = -1
NO_CODEC = -1
SPEAKER = -2        # codec slot filled by the speaker vector (CustomVoice row or Base x-vector)


@dataclass
class PromptPlan:
    text_ids: list[int] = field(default_factory=list)      # [L], NO_TEXT for codec-only
    codec_ids: list[int] = field(default_factory=list)     # [L], NO_CODEC / SPEAKER / codec row
    ref_frames: list[int] = field(default_factory=list)    # [L], index of the reference frame or -1

    def __len__(self) -> int:
        return len(self.text_ids)

    def add(self, text_id: int = NO_TEXT, codec_id: int = NO_CODEC, ref_frame: int = -1) -> None:
        self.text_ids.append(text_id)
        self.codec_ids.append(codec_id)
        self.ref_frames.append(ref_frame)


def num_icl_prefill_positions(num_ref_frames: int) -> int:
    """Dual-track ICL prefill length of the text track: the codec track [bos, F1..FK]."""
    return num_ref_frames + 1


def plan_prompt(vocab: PromptVocab, prefill_text_ids: list[int], *, language: str,
                non_streaming_mode: bool, role_ids: list[int] | None = None,
                instruct_ids: list[int] | None = None, speaker: str | None = None,
                has_speaker_vector: bool = False, num_ref_frames: int = 0) -> PromptPlan:
    """The prefill layout. `prefill_text_ids` comes from TextFeed.take_prefill(); the speaker
    is either a named one (a CustomVoice codec row) or an external vector (Base x-vector)."""
    if speaker and has_speaker_vector:
        raise ValueError("a prompt takes a named speaker or a speaker vector, not both")
    if num_ref_frames > 0 and not has_speaker_vector:
        raise ValueError("in-context cloning needs the reference x-vector as the speaker vector")
    plan = PromptPlan()
    for token in instruct_ids or ():
        plan.add(text_id=token)
    for token in role_ids if role_ids is not None else vocab.role_ids:
        plan.add(text_id=token)

    control = vocab.control_ids(language, speaker)
    if speaker:
        control = control + [vocab.speaker_id(speaker)]
    elif has_speaker_vector:
        control = control + [SPEAKER]
    for codec_id in control:
        plan.add(text_id=vocab.tts_pad_id, codec_id=codec_id)
    plan.add(text_id=vocab.tts_bos_id, codec_id=vocab.ids.codec_pad)

    if num_ref_frames > 0:
        _plan_icl(plan, vocab, prefill_text_ids, num_ref_frames, non_streaming_mode)
    elif non_streaming_mode:
        for token in prefill_text_ids:
            plan.add(text_id=token, codec_id=vocab.ids.codec_pad)
        plan.add(text_id=vocab.tts_pad_id, codec_id=vocab.ids.codec_bos)
    else:
        if len(prefill_text_ids) != 1:
            raise ValueError(f"dual-track prefill takes exactly t1, got {len(prefill_text_ids)} ids")
        plan.add(text_id=prefill_text_ids[0], codec_id=vocab.ids.codec_bos)
    return plan


def _plan_icl(plan: PromptPlan, vocab: PromptVocab, text_ids: list[int], num_ref_frames: int,
              non_streaming_mode: bool) -> None:
    codec_track = [(vocab.ids.codec_bos, -1)] + [(NO_CODEC, k) for k in range(num_ref_frames)]
    if non_streaming_mode:
        for token in text_ids:
            plan.add(text_id=token, codec_id=vocab.ids.codec_pad)
        for codec_id, frame in codec_track:
            plan.add(text_id=vocab.tts_pad_id, codec_id=codec_id, ref_frame=frame)
        return
    if len(text_ids) != len(codec_track):
        raise ValueError(f"dual-track ICL prefill needs {len(codec_track)} text positions, got {len(text_ids)}")
    for token, (codec_id, frame) in zip(text_ids, codec_track):
        plan.add(text_id=token, codec_id=codec_id, ref_frame=frame)
