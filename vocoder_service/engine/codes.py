"""The code frames a talker sends: their layout ([n, 16] integer codes) and the checks that
`VocoderEngine.add_frames` runs on every frames message before anything is buffered."""
from __future__ import annotations

import numpy as np

from vocoder_service.engine.outputs import EngineError

NUM_CODE_GROUPS = 16


def validate_codes(request_id: str, codes: np.ndarray, codebook_size: int) -> np.ndarray:
    """`codes` as int64 [n, NUM_CODE_GROUPS]; EngineError(INVALID_ARGUMENT) on a bad shape, dtype or code."""
    codes = np.asarray(codes)
    if codes.ndim != 2 or codes.shape[1] != NUM_CODE_GROUPS:
        raise EngineError("INVALID_ARGUMENT", f"request {request_id!r}: frames must be [n, {NUM_CODE_GROUPS}], got shape {list(codes.shape)}")
    if codes.dtype.kind not in "iu":
        raise EngineError("INVALID_ARGUMENT", f"request {request_id!r}: frames must be integers, got {codes.dtype}")
    # One pass on the hot path (a message per frame): negatives wrap to huge values as uint64.
    if codes.size and bool((codes.astype(np.uint64, copy=False) >= codebook_size).any()):
        raise EngineError("INVALID_ARGUMENT", f"request {request_id!r}: codes must lie in [0, {codebook_size}), got [{codes.min()}, {codes.max()}]")
    return codes.astype(np.int64, copy=False)
