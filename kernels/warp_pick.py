"""Temperature + top-k/top-p mask + seeded Gumbel-max pick + greedy select dispatcher: one custom op,
qwen3tts::warp_pick, backed by the fused Triton kernel where it can run and by the eager reference
elsewhere. In talker_service.model.sampling.choose_tokens_keyed it is everything but the topk/sort of
the raw logits and the greedy argmax: the temperature (ones_like, where, a [bs, V] division), the
masking tail of _candidates (~15 launches), gumbel_pick and the final greedy/sampled where, so a
sampling is 3 launches (argmax, topk/sort, this op; it was 7). torch.compile and dispatch-mode op
counters see ONE op.

Routing, inside the op, in order:
1. CPU tensors -> eager reference, unless QWEN3_TTS_WARPPICK_CPU_TRITON=1 asks for the Triton path
   (tests set it with TRITON_INTERPRET=1 before triton is imported, so the kernel runs in the
   interpreter; without TRITON_INTERPRET the launch fails and that failure is recorded);
2. K outside [1, 4096], or no rows -> eager reference;
3. a Triton failure was recorded earlier -> eager reference;
4. otherwise the Triton launcher. If importing triton, compiling or launching raises, the failure is
   logged once with its traceback, remembered for the life of the process, and this call and every
   later one use the eager reference.
Argument checks (shapes, dtypes, devices, vocab_size; metadata only, no host sync) raise ValueError
before the op. The failure memory, lazy launcher import and device check live in kernels/triton_route.py.
"""
from __future__ import annotations

from typing import Optional

import torch

from kernels.triton_route import TritonRoute
from kernels.warp_pick_reference import check_args, warp_pick_reference

CPU_TRITON_ENV = "QWEN3_TTS_WARPPICK_CPU_TRITON"
MAX_K = 4096  # kernels.gumbel_pick_triton.MAX_K (both picks), repeated so routing never imports triton

_route = TritonRoute("warp_pick", "kernels.warp_pick_triton", "warp_pick_triton", CPU_TRITON_ENV, __name__)
triton_failure = _route.triton_failure
reset_triton_failure = _route.reset_failure


def _wants_triton(values: torch.Tensor) -> bool:
    if values.shape[0] == 0 or not 1 <= values.shape[1] <= MAX_K:
        return False
    return _route.allows(values)


def _reference_op(values: torch.Tensor, token_ids: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor,
                  top_p: torch.Tensor, do_sample: torch.Tensor, greedy: torch.Tensor, vocab_size: int,
                  keys: torch.Tensor, hashes: Optional[torch.Tensor]) -> torch.Tensor:
    return warp_pick_reference(values, token_ids, temperature, top_k, top_p, do_sample, greedy, vocab_size, keys,
                               hashes).contiguous()


@torch.library.custom_op("qwen3tts::warp_pick", mutates_args=())
def warp_pick_op(values: torch.Tensor, token_ids: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor,
                 top_p: torch.Tensor, do_sample: torch.Tensor, greedy: torch.Tensor, vocab_size: int,
                 keys: torch.Tensor, hashes: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The op body: Triton or reference, always a fresh int64 [bs] tensor (what the fake promises)."""
    return _route.run((values, token_ids, temperature, top_k, top_p, do_sample, greedy, vocab_size, keys, hashes),
                      _reference_op, wanted=_wants_triton(values))


@warp_pick_op.register_fake
def _warp_pick_fake(values: torch.Tensor, token_ids: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor,
                    top_p: torch.Tensor, do_sample: torch.Tensor, greedy: torch.Tensor, vocab_size: int,
                    keys: torch.Tensor, hashes: Optional[torch.Tensor] = None) -> torch.Tensor:
    return values.new_empty((values.shape[0],), dtype=torch.int64)


def warp_pick(values: torch.Tensor, token_ids: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor,
              top_p: torch.Tensor, do_sample: torch.Tensor, greedy: torch.Tensor, vocab_size: int,
              keys: torch.Tensor, hashes: Optional[torch.Tensor] = None) -> torch.Tensor:
    """int64 [bs]: the chosen token of every row -- temperature, _candidates' top-k/top-p masking,
    gumbel_pick, and greedy[row] where do_sample is False -- in one op (kernels/warp_pick_reference.py
    defines it).

    values [bs, K] float32 raw (unscaled) logits sorted descending (topk/sort output); token_ids
    [bs, K] int64 their vocabulary ids; temperature [bs] float32 (> 0 where do_sample; anything,
    0 included, elsewhere); top_k [bs] int64 (0 = off); top_p [bs] float32 in (0, 1]; do_sample [bs]
    bool; greedy [bs] int64 the token of each row that does not sample (the caller's argmax);
    vocab_size: what top_k = 0 means (>= K); keys [bs] int64 noise keys in [0, 2**32) (a strided
    view is fine); hashes: optional int64 noise.token_hashes(V) table (same result).
    """
    check_args(values, token_ids, temperature, top_k, top_p, do_sample, greedy, vocab_size, keys, hashes)
    if values.requires_grad and torch.is_grad_enabled():
        values = values.detach()  # an index has no gradient; the op has no autograd formula
    return warp_pick_op(values, token_ids, temperature, top_k, top_p, do_sample, greedy, vocab_size, keys, hashes)
