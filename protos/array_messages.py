"""The arrays of the multi-array messages (FRAMES, PCM; see vocoder.proto), what each may hold,
and the checks that they agree with each other and with their header. `protos.wire` encodes and
decodes them; this module only describes them (the layout is documented in protos/README.md).

Each message has two array frames: a small integer table with one row per entry (chunk) whose
columns are the per-entry numbers, and the bulk payload (codes, PCM). One table rather than one
frame per column: every ZeroMQ frame costs a send call, a spec and a check on both sides (pyzmq
sends a multipart message part by part): with a frame per column a batch-1 step took ~1.7x the
host time, while the columns of a table are zero-copy views all the same.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

import numpy as np
from google.protobuf.message import Message

CODES_PER_FRAME = 16   # codec code groups per frame: FRAMES codes are [rows, CODES_PER_FRAME]
# FRAMES entries table: one row per entry, these columns (uint32).
FRAMES_ENTRY_COLUMNS = ("handle", "seq", "num_frames")
# PCM chunks table: one row per chunk, these columns (uint64); times in integer microseconds.
PCM_CHUNK_COLUMNS = ("seq", "sample_offset", "num_samples", "num_frames", "queue_us", "decode_us",
                     "batch_size", "is_graph")


@dataclass(frozen=True)
class ArrayRule:
    """What one array frame may hold."""

    name: str
    dtypes: frozenset[np.dtype]
    ndim: int


class FramesArrays(NamedTuple):
    """FRAMES frames 2 and 3 (see vocoder.proto FramesChunk)."""

    entries: np.ndarray   # uint32 [num_entries, 3]: handle, seq, num_frames (FRAMES_ENTRY_COLUMNS)
    codes: np.ndarray     # int16 | int32 [sum(num_frames), 16]: the entries' rows back to back

    @property
    def handles(self) -> np.ndarray:      # FramesOpen.handle of each entry's stream
        return self.entries[:, 0]

    @property
    def seqs(self) -> np.ndarray:         # per-request sequence numbers
        return self.entries[:, 1]

    @property
    def num_frames(self) -> np.ndarray:   # rows of each entry in codes
        return self.entries[:, 2]


class PcmArrays(NamedTuple):
    """PCM frames 2 and 3 (see vocoder.proto PcmBatch)."""

    chunks: np.ndarray    # uint64 [num_chunks, 8]: PCM_CHUNK_COLUMNS
    pcm: np.ndarray       # float32 [sum(num_samples)]: the chunks' samples back to back

    @property
    def num_samples(self) -> np.ndarray:
        return self.chunks[:, 2]


def frames_entries(handles, seqs, num_frames) -> np.ndarray:
    """The FRAMES entries table [E, 3] uint32 from its three columns (sequences of ints)."""
    return np.array([handles, seqs, num_frames], dtype="<u4").T.copy()


def array_rule(name: str, ndim: int, *dtypes: str) -> ArrayRule:
    return ArrayRule(name, frozenset(np.dtype(d) for d in dtypes), ndim)


def _check_table(kind: str, name: str, table: np.ndarray, columns: tuple[str, ...]) -> int:
    if table.shape[1] != len(columns):
        raise ValueError(f"{kind} {name} must be [rows, {len(columns)}] ({', '.join(columns)}), "
                         f"got {list(table.shape)}")
    return table.shape[0]


def _check_frames(header: Message, arrays: FramesArrays) -> None:
    _check_table("FRAMES", "entries", arrays.entries, FRAMES_ENTRY_COLUMNS)
    rows, width = arrays.codes.shape
    if width != CODES_PER_FRAME:
        raise ValueError(f"FRAMES codes must be [rows, {CODES_PER_FRAME}], got {[rows, width]}")
    total = int(arrays.num_frames.sum(dtype=np.uint64))
    if total != rows:
        raise ValueError(f"FRAMES num_frames add up to {total} rows but codes has {rows}")


def _check_pcm(header: Message, arrays: PcmArrays) -> None:
    num_chunks = _check_table("PCM", "chunks", arrays.chunks, PCM_CHUNK_COLUMNS)
    if len(header.request_ids) != num_chunks:
        raise ValueError(f"PCM has {len(header.request_ids)} request_ids for {num_chunks} chunks")
    # Wrapping uint64 sums could only hide a lie of 2**64 samples; the frame could not hold them anyway.
    total = int(arrays.num_samples.sum(dtype=np.uint64))
    if total != len(arrays.pcm) or bool((arrays.num_samples > len(arrays.pcm)).any()):
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


FRAMES_ARRAYS = ArrayGroup((array_rule("entries", 2, "<u4"), array_rule("codes", 2, "<i2", "<i4")),
                           FramesArrays, _check_frames)
PCM_ARRAYS = ArrayGroup((array_rule("chunks", 2, "<u8"), array_rule("pcm", 1, "<f4")), PcmArrays, _check_pcm)
assert tuple(r.name for r in FRAMES_ARRAYS.rules) == FramesArrays._fields
assert tuple(r.name for r in PCM_ARRAYS.rules) == PcmArrays._fields
