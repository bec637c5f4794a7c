"""One PCM message (every chunk a vocoder decode step made for one gateway) -> per-request chunks.

`split_pcm` is what a receiver of PCM does after `wire.decode`: it yields one `PcmPart` per chunk,
whose `pcm` is a read-only view into the message's single float32 buffer (no copy), and whose
attributes read like the per-chunk header the gateway's sessions consume (`seq`, `is_final`,
`timings.decode_ms`, `generation.num_frames`, ...). Parts are named tuples: immutable and, at a
few hundred per message, several times cheaper to make than frozen dataclasses.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from protos import wire
from protos.tts.internal.v1 import vocoder_pb2

# Shared by every non-final part; read-only by convention (nobody writes a received summary).
_NO_SUMMARY = vocoder_pb2.GenerationSummary()
_NO_FAULTS = (0, 0)


class ChunkTimes(NamedTuple):
    """How the vocoder produced one chunk."""

    queue_ms: float      # newest frame received -> decode step start
    decode_ms: float     # wall time of the batched decode
    batch_size: int      # requests decoded together (0: no decode ran, an empty closing chunk)
    is_graph: bool       # the decode replayed a captured CUDA graph


class PcmPart(NamedTuple):
    """One request's chunk out of a PcmBatch."""

    request_id: str
    seq: int                 # 0, 1, 2, ... per request
    sample_offset: int       # first sample of the chunk in the request's audio, at sample_rate_hz
    num_samples: int
    num_frames: int          # codec frames decoded into the chunk
    sample_rate_hz: int
    is_final: bool
    timings: ChunkTimes
    generation: vocoder_pb2.GenerationSummary   # the talker's summary on the final chunk, else empty
    pcm: np.ndarray          # float32 [num_samples], a read-only view on the received frame
    # what the vocoder found in the chunk (PcmSampleFaults): NaN/inf samples it sent as 0, samples past +-1.0
    num_nonfinite_samples: int = 0
    num_clipped_samples: int = 0


def split_pcm(header: vocoder_pb2.PcmBatch, arrays: wire.PcmArrays) -> list[PcmPart]:
    """Per-chunk parts of a decoded PCM message, in chunk order; ValueError if the header names
    an empty request id or ends one chunk twice (the arrays were checked by `wire.decode`)."""
    request_ids = list(header.request_ids)
    if not all(request_ids):
        raise ValueError(f"PCM chunk {request_ids.index('')} has an empty request_id")
    finals: dict[int, vocoder_pb2.GenerationSummary] = {}
    for final in header.finals:
        if final.chunk_index in finals:
            raise ValueError(f"PCM ends chunk {final.chunk_index} ({request_ids[final.chunk_index]!r}) twice")
        finals[final.chunk_index] = final.generation
    faults = {f.chunk_index: (f.num_nonfinite_samples, f.num_clipped_samples) for f in header.sample_faults}
    rows = arrays.chunks.tolist()   # wire.PCM_CHUNK_COLUMNS per chunk
    parts, end = [], 0
    for index, (rid, (seq, offset, num_samples, num_frames, queue_us, decode_us, batch_size, is_graph)) \
            in enumerate(zip(request_ids, rows)):
        generation = finals.get(index)
        end += num_samples
        parts.append(PcmPart(rid, seq, offset, num_samples, num_frames, header.sample_rate_hz, generation is not None,
                             ChunkTimes(queue_us / 1e3, decode_us / 1e3, batch_size, bool(is_graph)),
                             _NO_SUMMARY if generation is None else generation,
                             arrays.pcm[end - num_samples:end], *faults.get(index, _NO_FAULTS)))
    return parts
