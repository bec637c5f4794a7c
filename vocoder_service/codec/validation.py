"""Input checks for decode and streaming steps, run before (never inside) the graphable body.

Two front ends take the same checks: `check_step` / `check_codes` for torch tensors (the decoder's
API; a device tensor is read back once, a sync) and `check_step_arrays` for the host numpy arrays
the service's runner decodes (no device involved). Past the type checks both run the same shape
and value checks on numpy, so they accept and refuse exactly the same calls with the same
messages. A rejected call raises ValueError naming the problem and has touched no state.
"""
from __future__ import annotations

import numpy as np
import torch

_INT_DTYPES = (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64)


def _check_int_tensor(name: str, value, ndim: int) -> np.ndarray:
    """value's type, dtype and rank checked; -> its values on the host."""
    if not isinstance(value, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    if value.dtype not in _INT_DTYPES:
        raise ValueError(f"{name} must have an integer dtype, got {value.dtype}")
    if value.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dims, got shape {tuple(value.shape)}")
    return value.detach().cpu().numpy()


def _check_int_array(name: str, value, ndim: int) -> np.ndarray:
    if not isinstance(value, np.ndarray):
        raise ValueError(f"{name} must be a numpy array, got {type(value).__name__}")
    if not np.issubdtype(value.dtype, np.integer):
        raise ValueError(f"{name} must have an integer dtype, got {value.dtype}")
    if value.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dims, got shape {tuple(value.shape)}")
    return value


def _check_codes_shape(codes: np.ndarray, num_quantizers: int) -> None:
    batch, num_books, num_frames = codes.shape
    if num_books != num_quantizers:
        raise ValueError(f"wrong number of codebooks: expected {num_quantizers}, got {num_books} "
                         f"(codes shape {tuple(codes.shape)})")
    if batch == 0:
        raise ValueError("empty batch: codes has batch size 0")
    if num_frames == 0:
        raise ValueError("empty chunk: codes has 0 frames")


def _check_code_values(codes: np.ndarray, lengths: np.ndarray | None, codebook_size: int) -> None:
    """codes [B, Q, T]; only each row's first lengths[row] frames count (None: every frame)."""
    if int(codes.min()) >= 0 and int(codes.max()) < codebook_size:
        return   # the common case: one pass over the codes, padding included
    if lengths is not None:
        valid = np.arange(codes.shape[2])[None, :] < lengths[:, None]          # [B, T]
        codes = np.where(valid[:, None, :], codes, 0)
    for bad, what in ((codes < 0, "negative code"), (codes >= codebook_size, f"code >= codebook size {codebook_size}")):
        if bad.any():
            row, book, frame = (int(i) for i in np.argwhere(bad)[0])
            raise ValueError(f"{what}: {int(codes[row, book, frame])} at batch row {row}, codebook {book}, frame {frame}")


def _check_step_values(codes: np.ndarray, slots: np.ndarray, lengths: np.ndarray, codebook_size: int,
                       max_slots: int) -> None:
    batch, _, num_frames = codes.shape
    if slots.shape[0] != batch or lengths.shape[0] != batch:
        raise ValueError(f"batch size mismatch: codes {batch}, slots {slots.shape[0]}, lengths {lengths.shape[0]}")
    out_of_range = (slots < 0) | (slots >= max_slots)
    if out_of_range.any():
        raise ValueError(f"slot out of range [0, {max_slots}): {slots[out_of_range].tolist()}")
    listed = slots.tolist()
    if len(set(listed)) != batch:
        raise ValueError(f"duplicate slots in one batch: {sorted({s for s in listed if listed.count(s) > 1})}")
    if ((lengths < 1) | (lengths > num_frames)).any():
        raise ValueError(f"lengths must lie in [1, {num_frames}] (chunk frames), got {lengths.tolist()}")
    _check_code_values(codes, lengths, codebook_size)


def check_codes(codes, num_quantizers: int, codebook_size: int) -> None:
    """codes [B, Q, T] tensor for an offline decode."""
    host = _check_int_tensor("codes", codes, 3)
    _check_codes_shape(host, num_quantizers)
    _check_code_values(host, None, codebook_size)


def check_step(codes, slots, lengths, num_quantizers: int, codebook_size: int, max_slots: int) -> None:
    """codes [bs, Q, t], slots [bs], lengths [bs] tensors for one streaming step."""
    host_codes = _check_int_tensor("codes", codes, 3)
    _check_codes_shape(host_codes, num_quantizers)
    host_slots = _check_int_tensor("slots", slots, 1)
    host_lengths = _check_int_tensor("lengths", lengths, 1)
    _check_step_values(host_codes, host_slots, host_lengths, codebook_size, max_slots)


def check_step_arrays(codes, slots, lengths, num_quantizers: int, codebook_size: int, max_slots: int) -> None:
    """check_step for host numpy arrays (the runner's input), the same checks and messages.

    The service runs it before every decode: on numpy a batch-1 check costs ~20 us where the torch
    tensor ops it replaced cost ~130 us, which is 7% of a compiled first chunk.
    """
    codes = _check_int_array("codes", codes, 3)
    _check_codes_shape(codes, num_quantizers)
    slots = _check_int_array("slots", slots, 1)
    lengths = _check_int_array("lengths", lengths, 1)
    _check_step_values(codes, slots, lengths, codebook_size, max_slots)
