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
The failure memory, lazy launcher import and device check live in kernels/triton_route.py.
"""
from __future__ import annotations

from typing import Optional

import torch

from kernels.gumbel_pick_reference import check_args, gumbel_pick_reference
from kernels.triton_route import TritonRoute

CPU_TRITON_ENV = "QWEN3_TTS_GUMBEL_CPU_TRITON"
MAX_K = 4096  # kernels.gumbel_pick_triton.MAX_K, repeated so routing never imports triton

_route = TritonRoute("gumbel_pick", "kernels.gumbel_pick_triton", "gumbel_pick_triton",
                     CPU_TRITON_ENV, __name__)
triton_failure = _route.triton_failure
reset_triton_failure = _route.reset_failure


def _wants_triton(values: torch.Tensor) -> bool:
    if values.shape[0] == 0 or not 1 <= values.shape[1] <= MAX_K:
        return False
    return _route.allows(values)


def _reference_op(values: torch.Tensor, token_ids: torch.Tensor, keys: torch.Tensor,
                  hashes: Optional[torch.Tensor]) -> torch.Tensor:
    return gumbel_pick_reference(values, token_ids, keys, hashes).contiguous()


@torch.library.custom_op("qwen3tts::gumbel_pick", mutates_args=())
def gumbel_pick_op(values: torch.Tensor, token_ids: torch.Tensor, keys: torch.Tensor,
                   hashes: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The op body: Triton or reference, always a fresh int64 [bs] tensor (what the fake promises)."""
    return _route.run((values, token_ids, keys, hashes), _reference_op, wanted=_wants_triton(values))


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
    check_args(values, token_ids, keys, hashes)
    if values.requires_grad and torch.is_grad_enabled():
        values = values.detach()  # an index has no gradient; the op has no autograd formula
    return gumbel_pick_op(values, token_ids, keys, hashes)
