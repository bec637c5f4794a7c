"""The arrays of the multi-array messages (FRAMES, PCM; see vocoder.proto), what each may hold,
and the checks that they agree with each other and with their header. `protos.wire` encodes and
decodes them; this module only describes them (the layout is documented in protos/README.md)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

import numpy as np
from google.protobuf.message import Message

CODES_PER_FRAME = 16   # codec code groups per frame: FRAMES codes are [rows, CODES_PER_FRAME]


@dataclass(frozen=True)
class ArrayRule:
    """What one array frame may hold."""

    name: str
    dtypes: frozenset[np.dtype]
    ndim: int


class FramesArrays(NamedTuple):
    """FRAMES frames 2..5 (see vocoder.proto FramesChunk)."""

    handles: np.ndarray      # uint32 [num_entries] FramesOpen.handle of each entry's stream
    seqs: np.ndarray         # uint32 [num_entries] per-request sequence numbers
    num_frames: np.ndarray   # uint32 [num_entries] rows of each entry in codes
    codes: np.ndarray        # int16 | int32 [sum(num_frames), 16] the entries' rows back to back


class PcmArrays(NamedTuple):
    """PCM frames 2..10 (see vocoder.proto PcmBatch); one element per chunk except pcm."""

    seqs: np.ndarray             # uint32 per-request chunk sequence numbers
    sample_offsets: np.ndarray   # uint64 first sample of each chunk in its request's audio
    num_samples: np.ndarray      # uint32 samples of each chunk in pcm
    num_frames: np.ndarray       # uint32 codec frames decoded into each chunk
    queue_ms: np.ndarray         # float32 newest frame received -> decode start, ms
    decode_ms: np.ndarray        # float32 wall time of the decode, ms
    batch_sizes: np.ndarray      # uint32 requests decoded together
    is_graph: np.ndarray         # uint8 1 when the decode replayed a CUDA graph
    pcm: np.ndarray              # float32 [sum(num_samples)] samples back to back


def array_rule(name: str, ndim: int, *dtypes: str) -> ArrayRule:
    return ArrayRule(name, frozenset(np.dtype(d) for d in dtypes), ndim)


def _same_length(kind: str, arrays: tuple, names: tuple[str, ...]) -> int:
    lengths = [len(getattr(arrays, name)) for name in names]
    if len(set(lengths)) > 1:
        listed = ", ".join(f"{name} {n}" for name, n in zip(names, lengths))
        raise ValueError(f"{kind} per-entry arrays disagree in length: {listed}")
    return lengths[0]


def _check_frames(header: Message, arrays: FramesArrays) -> None:
    _same_length("FRAMES", arrays, ("handles", "seqs", "num_frames"))
    rows, width = arrays.codes.shape
    if width != CODES_PER_FRAME:
        raise ValueError(f"FRAMES codes must be [rows, {CODES_PER_FRAME}], got {[rows, width]}")
    total = int(arrays.num_frames.sum(dtype=np.uint64))
    if total != rows:
        raise ValueError(f"FRAMES num_frames add up to {total} rows but codes has {rows}")


def _check_pcm(header: Message, arrays: PcmArrays) -> None:
    num_chunks = _same_length("PCM", arrays, PcmArrays._fields[:-1])
    if len(header.request_ids) != num_chunks:
        raise ValueError(f"PCM has {len(header.request_ids)} request_ids for {num_chunks} chunks")
    total = int(arrays.num_samples.sum(dtype=np.uint64))
    if total != len(arrays.pcm):
        raise ValueError(f"PCM num_samples add up to {total} samples but pcm has {len(arrays.pcm)}")
    for final in header.finals:
        if final.chunk_index >= num_chunks:
            raise ValueError(f"PCM final chunk_index {final.chunk_index} is out of range for {num_chunks} chunks")


@dataclass(frozen=True)
class ArrayGroup:
    """The array frames of a multi-array message: their rules in frame order, the named tuple
    `decode` returns them in, and the checks that they agree with each other and the header."""

    rules: tuple[ArrayRule, ...]
    tuple_class: type
    check: Callable[[Message, Any], None]


FRAMES_ARRAYS = ArrayGroup(
    (array_rule("handles", 1, "<u4"), array_rule("seqs", 1, "<u4"), array_rule("num_frames", 1, "<u4"),
     array_rule("codes", 2, "<i2", "<i4")),
    FramesArrays, _check_frames)
PCM_ARRAYS = ArrayGroup(
    (array_rule("seqs", 1, "<u4"), array_rule("sample_offsets", 1, "<u8"), array_rule("num_samples", 1, "<u4"),
     array_rule("num_frames", 1, "<u4"), array_rule("queue_ms", 1, "<f4"), array_rule("decode_ms", 1, "<f4"),
     array_rule("batch_sizes", 1, "<u4"), array_rule("is_graph", 1, "<u1"), array_rule("pcm", 1, "<f4")),
    PcmArrays, _check_pcm)
assert tuple(r.name for r in FRAMES_ARRAYS.rules) == FramesArrays._fields
assert tuple(r.name for r in PCM_ARRAYS.rules) == PcmArrays._fields
