"""Embedding a PromptPlan into the talker's prefill inputs.

Each position is 0 + T(text) + C(codec) accumulated into a zero buffer: adding to an exact 0 is
exact and two-term float addition commutes, so every position equals the official `T + C` sum
bit for bit, up to the matmul blocking of the text projection. The groups are added in a fixed
order (text, codec, speaker vector, reference frames) and each group's lookup sees the same ids in
the same order as before, so the result does not depend on how the positions are found.

The positions are found on the host, from the plan's lists: boolean masks on the device would need
a device->host read-back for every `.any()` and every mask index (nonzero), and this runs in the
talker loop thread, where such a wait stalls the running streams' next step. The device gets the
indices in one asynchronous host->device copy and does plain index reads and writes.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Protocol

import numpy as np
import torch

from service_common.host_copy import to_device_async

from .layout import NO_CODEC, NO_TEXT, SPEAKER, PromptPlan


class Embedder(Protocol):
    """The three lookups the talker model exposes (TalkerModel implements them)."""

    def embed_text(self, ids: torch.Tensor) -> torch.Tensor: ...      # [...] -> [..., H]
    def embed_codec(self, ids: torch.Tensor) -> torch.Tensor: ...     # [...] -> [..., H]
    def embed_frame(self, codes: torch.Tensor) -> torch.Tensor: ...   # [..., 16] -> [..., H]


@dataclass
class PlanGroups:
    """Host index arrays (int64) of one plan: the positions of each input group, and the ids they
    look up. A group with no positions is empty and is skipped."""

    text_pos: np.ndarray      # [Nt] positions with a text id
    text_ids: np.ndarray      # [Nt] their text ids
    codec_pos: np.ndarray     # [Nc] positions with a codec-table row
    codec_ids: np.ndarray     # [Nc] their codec rows
    speaker_pos: np.ndarray   # [Ns] the speaker-vector slot(s)
    frame_pos: np.ndarray     # [Nf] positions of reference frames
    frame_ids: np.ndarray     # [Nf] which reference frame each one is
    num_unused: int           # positions with no text, codec or frame input (an error)


def plan_groups(plan: PromptPlan) -> PlanGroups:
    """The plan's groups, found with numpy on its python lists (no device involved)."""
    text = np.asarray(plan.text_ids, dtype=np.int64)       # [L]
    codec = np.asarray(plan.codec_ids, dtype=np.int64)     # [L]
    frames = np.asarray(plan.ref_frames, dtype=np.int64)   # [L]
    has_text = text != NO_TEXT
    has_codec = codec >= 0
    has_frame = frames >= 0
    (text_pos,), (codec_pos,), (frame_pos,) = has_text.nonzero(), has_codec.nonzero(), has_frame.nonzero()
    (speaker_pos,) = (codec == SPEAKER).nonzero()
    unused = (codec == NO_CODEC) & ~has_text & ~has_frame
    return PlanGroups(text_pos=text_pos, text_ids=text[text_pos], codec_pos=codec_pos, codec_ids=codec[codec_pos],
                      speaker_pos=speaker_pos, frame_pos=frame_pos, frame_ids=frames[frame_pos],
                      num_unused=int(unused.sum()))


def check_plan_inputs(groups: PlanGroups, *, hidden_size: int,
                      speaker_vector: torch.Tensor | None, ref_codes: torch.Tensor | None) -> None:
    """Raise ValueError when the plan needs an input that is missing or malformed. Checked in the
    order the embedding would meet the problems, so the first problem is the one reported."""
    if groups.speaker_pos.size:
        if speaker_vector is None:
            raise ValueError("the prompt has a speaker slot but no speaker vector was given")
        if speaker_vector.shape != (hidden_size,):
            raise ValueError(f"speaker vector must be [{hidden_size}], got {list(speaker_vector.shape)}")
    if groups.frame_pos.size:
        if ref_codes is None:
            raise ValueError("the prompt has reference-frame positions but no reference codes were given")
        # an out-of-range frame would be a device-side assert on CUDA, which poisons the context
        if int(groups.frame_ids.max()) >= ref_codes.shape[0]:
            raise ValueError(f"the prompt reads reference frame {int(groups.frame_ids.max())}, "
                             f"but only {ref_codes.shape[0]} reference frames were given")
    if groups.num_unused:
        raise ValueError("prompt plan has positions with neither text nor codec input")


def _device_groups(groups: PlanGroups, device: torch.device) -> dict[str, torch.Tensor]:
    """Every index array of `groups` on the device, through one host->device copy."""
    names = [f.name for f in fields(PlanGroups) if f.name != "num_unused"]
    arrays = [getattr(groups, name) for name in names]
    packed = to_device_async(torch.from_numpy(np.concatenate(arrays)), device)   # [sum of sizes]
    return dict(zip(names, torch.split(packed, [a.size for a in arrays])))


@dataclass
class PreparedPrompt:
    """A plan's host-side index groups, checked against its inputs: ready to embed (prepare_plan)."""

    groups: PlanGroups
    length: int                                  # positions
    speaker_vector: torch.Tensor | None = None   # [H] for the SPEAKER slot
    ref_codes: torch.Tensor | None = None        # [K, 16] for the reference-frame positions


def prepare_plan(plan: PromptPlan, *, hidden_size: int, speaker_vector: torch.Tensor | None = None,
                 ref_codes: torch.Tensor | None = None) -> PreparedPrompt:
    """Host-only: the plan's groups, ValueError when the plan needs an input that is missing."""
    groups = plan_groups(plan)
    check_plan_inputs(groups, hidden_size=hidden_size, speaker_vector=speaker_vector, ref_codes=ref_codes)
    return PreparedPrompt(groups, len(plan), speaker_vector, ref_codes)


@torch.no_grad()
def embed_prepared(prompts: list[PreparedPrompt], embedder: Embedder, *, device: torch.device, dtype: torch.dtype,
                   hidden_size: int) -> list[torch.Tensor]:
    """[L_i, H] prefill embeddings of several prompts, laid end to end in one buffer: one host->device
    copy of all their indices, one text lookup (embedding + projection) and one codec lookup for all
    of them, instead of ~15 launches per prompt. A burst of 256 arrivals was ~100 ms of launches in
    the talker loop one prompt at a time. Speaker vectors and reference frames (clones) are added
    per prompt. A prompt's values can differ from embedding it alone only by the text projection's
    GEMM blocking for a different row count (as batched prefill and decode already do)."""
    if not prompts:
        return []
    lengths = [p.length for p in prompts]
    offsets = np.cumsum([0] + lengths[:-1]).astype(np.int64)
    with_frames = [p for p in prompts if p.groups.frame_pos.size]
    frame_offsets = np.cumsum([0] + [p.ref_codes.shape[0] for p in with_frames[:-1]]).astype(np.int64)
    merged = PlanGroups(
        text_pos=np.concatenate([p.groups.text_pos + o for p, o in zip(prompts, offsets)]),
        text_ids=np.concatenate([p.groups.text_ids for p in prompts]),
        codec_pos=np.concatenate([p.groups.codec_pos + o for p, o in zip(prompts, offsets)]),
        codec_ids=np.concatenate([p.groups.codec_ids for p in prompts]),
        speaker_pos=np.concatenate([p.groups.speaker_pos + o for p, o in zip(prompts, offsets)]),
        frame_pos=np.concatenate([p.groups.frame_pos + o for p, o in zip(prompts, offsets)]),
        frame_ids=np.concatenate([np.zeros(0, np.int64)] + [p.groups.frame_ids + o
                                                             for p, o in zip(with_frames, frame_offsets)]),
        num_unused=0)
    index = _device_groups(merged, device)
    out = torch.zeros(sum(lengths), hidden_size, dtype=dtype, device=device)     # [sum L, H]

    # `out[pos] += x` is a gather, an add and a scatter: the same kernels the mask form ran, so the
    # sums round the same way; positions within a group are distinct, so the scatter is exact.
    if merged.text_pos.size:
        out[index["text_pos"]] += embedder.embed_text(index["text_ids"]).to(dtype)
    if merged.codec_pos.size:
        out[index["codec_pos"]] += embedder.embed_codec(index["codec_ids"]).to(dtype)
    if merged.speaker_pos.size:   # one vector per speaker slot, in the slots' order
        # (each vector copied on its own: a registered voice's may already live on the device)
        vectors = [to_device_async(p.speaker_vector, device).to(dtype) for p in prompts
                   for _ in range(p.groups.speaker_pos.size)]
        out[index["speaker_pos"]] += torch.stack(vectors)
    if merged.frame_pos.size:     # the clones' reference codes end to end; frame_ids index into them
        all_codes = torch.cat([to_device_async(p.ref_codes, device).to(torch.long) for p in with_frames])
        codes = all_codes[index["frame_ids"]]                                             # [Nf, 16]
        out[index["frame_pos"]] += embedder.embed_frame(codes).to(dtype)
    return list(out.split(lengths))


def embed_plan(plan: PromptPlan, embedder: Embedder, *, device: torch.device, dtype: torch.dtype,
               hidden_size: int, speaker_vector: torch.Tensor | None = None,
               ref_codes: torch.Tensor | None = None) -> torch.Tensor:
    """[L, H] prefill embeddings. speaker_vector [H] fills the SPEAKER slot; ref_codes [K, 16]
    fills the reference-frame positions. ValueError (before any device work) when the plan needs
    an input that is missing."""
    prepared = prepare_plan(plan, hidden_size=hidden_size, speaker_vector=speaker_vector, ref_codes=ref_codes)
    return embed_prepared([prepared], embedder, device=device, dtype=dtype, hidden_size=hidden_size)[0]
