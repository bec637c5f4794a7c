"""Seeded Gumbel-max pick dispatcher: one custom op, qwen3tts::gumbel_pick, backed by the fused Triton
kernel where it can run and by the eager reference elsewhere. It replaces the ~25-launch tail of
talker_service.model.sampling.choose_tokens_keyed (noise hash, -log(-log(u)), add, argmax, gather);
torch.compile and dispatch-mode op counters see ONE op.

Routing, inside the op, in order:
1. CPU tensors -> eager reference, unless QWEN3_TTS_GUMBEL_CPU_TRITON=1 asks for the Triton path
   (tests set it with TRITON_INTERPRET=1 before triton is imported, so the kernel runs in the
   interpreter; without TRITON_INTERPRET the launch fails and that failure is recorded);
2. K outside [1, 4096], or no rows -> eager reference;
3. a Triton failure was recorded earlier -> eager reference;
4. otherwise the Triton launcher. If importing triton, compiling or launching raises, the failure is
   logged once with its traceback, remembered for the life of the process, and this call and every
   later one use the eager reference.
Argument checks (shapes, dtypes, devices; metadata only, no host sync) raise ValueError before the op.
The failure memory repeats kernels/snakebeta.py's pattern (sharing it would mean editing that module).
"""
from __future__ import annotations

import logging
import os
import threading
from typing import Callable, Optional

import torch

from kernels.gumbel_pick_reference import gumbel_pick_reference

logger = logging.getLogger(__name__)

CPU_TRITON_ENV = "QWEN3_TTS_GUMBEL_CPU_TRITON"
MAX_K = 4096  # kernels.gumbel_pick_triton.MAX_K, repeated so routing never imports triton

_lock = threading.Lock()
_failure: Optional[str] = None  # "ExcType: message" of the first Triton failure, sticky
_launcher: Optional[Callable[..., torch.Tensor]] = None


def triton_failure() -> Optional[str]:
    """The recorded Triton failure ("ExcType: message"), or None while the kernel is in use."""
    return _failure


def reset_triton_failure() -> None:
    """Forget a recorded failure so the next call tries Triton again (tests, or after a fix)."""
    global _failure
    with _lock:
        _failure = None


def _record_failure(exc: BaseException) -> None:
    global _failure
    with _lock:
        if _failure is not None:
            return
        _failure = f"{type(exc).__name__}: {exc}"
    logger.warning("Triton gumbel_pick failed (%s); using the eager reference for the rest of this process",
                   _failure, exc_info=exc)


def _get_launcher() -> Optional[Callable[..., torch.Tensor]]:
    global _launcher
    if _launcher is None:
        try:
            from kernels.gumbel_pick_triton import gumbel_pick_triton
        except Exception as exc:  # no triton wheel, or a broken install: same fallback as a compile error
            _record_failure(exc)
            return None
        _launcher = gumbel_pick_triton
    return _launcher


def _check_args(values: torch.Tensor, token_ids: torch.Tensor, keys: torch.Tensor,
                hashes: Optional[torch.Tensor]) -> None:
    if values.dim() != 2 or token_ids.shape != values.shape:
        raise ValueError(f"gumbel_pick expects values and token_ids of one shape [bs, K], got "
                         f"{tuple(values.shape)} and {tuple(token_ids.shape)}")
    if keys.shape != (values.shape[0],):
        raise ValueError(f"gumbel_pick expects keys [bs] = [{values.shape[0]}], got {tuple(keys.shape)}")
    if values.dtype != torch.float32 or token_ids.dtype != torch.int64 or keys.dtype != torch.int64:
        raise ValueError(f"gumbel_pick expects float32 values and int64 token_ids/keys, got "
                         f"{values.dtype}, {token_ids.dtype}, {keys.dtype}")
    if hashes is not None and (hashes.dim() != 1 or hashes.dtype != torch.int64):
        raise ValueError(f"gumbel_pick expects an int64 [V] hashes table, got {hashes.dtype} {tuple(hashes.shape)}")
    for name, t in (("token_ids", token_ids), ("keys", keys), ("hashes", hashes)):
        if t is not None and t.device != values.device:
            raise ValueError(f"gumbel_pick: {name} is on {t.device} but values is on {values.device}")


def _wants_triton(values: torch.Tensor) -> bool:
    if _failure is not None or values.shape[0] == 0 or not 1 <= values.shape[1] <= MAX_K:
        return False
    return values.is_cuda or os.environ.get(CPU_TRITON_ENV) == "1"


@torch.library.custom_op("qwen3tts::gumbel_pick", mutates_args=())
def gumbel_pick_op(values: torch.Tensor, token_ids: torch.Tensor, keys: torch.Tensor,
                   hashes: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The op body: Triton or reference, always a fresh int64 [bs] tensor (what the fake promises)."""
    if _wants_triton(values):
        launcher = _get_launcher()
        if launcher is not None:
            try:
                return launcher(values, token_ids, keys, hashes)
            except Exception as exc:  # compile/launch errors come in many types; inputs were checked
                _record_failure(exc)
    return gumbel_pick_reference(values, token_ids, keys, hashes).contiguous()


@gumbel_pick_op.register_fake
def _gumbel_pick_fake(values: torch.Tensor, token_ids: torch.Tensor, keys: torch.Tensor,
                      hashes: Optional[torch.Tensor] = None) -> torch.Tensor:
    return values.new_empty((values.shape[0],), dtype=torch.int64)


def gumbel_pick(values: torch.Tensor, token_ids: torch.Tensor, keys: torch.Tensor,
                hashes: Optional[torch.Tensor] = None) -> torch.Tensor:
    """int64 [bs]: token_ids[row, argmax(values[row] + gumbel_for_tokens(keys, token_ids, hashes)[row])],
    first maximum on ties -- the sampled tokens of choose_tokens_keyed, in one op.

    values [bs, K] float32 warped logits (-inf where filtered); token_ids [bs, K] int64 vocabulary ids;
    keys [bs] int64 noise keys in [0, 2**32) (noise.row_keys / group_keys, a strided view is fine);
    hashes: optional int64 noise.token_hashes(V) table (same result, as in noise.uniform_for_tokens).
    """
    _check_args(values, token_ids, keys, hashes)
    if values.requires_grad and torch.is_grad_enabled():
        values = values.detach()  # an index has no gradient; the op has no autograd formula
    return gumbel_pick_op(values, token_ids, keys, hashes)
