"""Whole-row sampling dispatcher: one custom op, qwen3tts::sample_rows, backed by the Triton kernel
(kernels/sample_rows_triton.py: argmax, temperature, top-k/top-p and the seeded Gumbel-max pick over
the whole row in one launch, no sort) where it can run and by the eager sort path elsewhere.

talker_service.model.sampling.choose_tokens_keyed asks `wants_triton(logits)` and, when it says
yes, makes this one launch instead of its three (argmax, sort or topk, warp_pick) plus the float
copy. The op's own fallback (a Triton failure recorded during the call) is the sort over every
token, so it is exact for any top_k, whatever candidate_k the caller runs with.

Routing, in order:
1. CPU tensors -> eager reference, unless QWEN3_TTS_SAMPLEROWS_CPU_TRITON=1 asks for the Triton path
   (tests set it with TRITON_INTERPRET=1 before triton is imported);
2. V outside [1, 8192], or no rows -> eager reference;
3. a Triton failure was recorded earlier -> eager reference;
4. otherwise the Triton launcher; a failure to import, compile or launch is logged once, remembered
   for the life of the process, and this call and every later one use the eager reference.
"""
from __future__ import annotations

import torch

from kernels.sample_rows_reference import check_args, sample_rows_reference
from kernels.triton_route import TritonRoute

CPU_TRITON_ENV = "QWEN3_TTS_SAMPLEROWS_CPU_TRITON"
MAX_VOCAB = 8192  # kernels.sample_rows_triton.MAX_VOCAB, repeated so routing never imports triton

_route = TritonRoute("sample_rows", "kernels.sample_rows_triton", "sample_rows_triton", CPU_TRITON_ENV, __name__)
triton_failure = _route.triton_failure
reset_triton_failure = _route.reset_failure
# the gather variant's own failure memory: a failure there leaves the plain kernel in use
_gather_route = TritonRoute("sample_rows + gather", "kernels.sample_rows_triton", "sample_rows_gather_triton",
                            CPU_TRITON_ENV, __name__)
gather_triton_failure = _gather_route.triton_failure
reset_gather_triton_failure = _gather_route.reset_failure


def wants_triton(logits: torch.Tensor) -> bool:
    """Whether a call with these logits would run the kernel (CUDA or the forced CPU path, no
    failure recorded, a vocabulary it takes)."""
    if logits.dim() != 2 or logits.shape[0] == 0 or not 1 <= logits.shape[1] <= MAX_VOCAB:
        return False
    return _route.allows(logits)


def _reference_op(logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                  do_sample: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    return sample_rows_reference(logits, temperature, top_k, top_p, do_sample, keys).contiguous()


@torch.library.custom_op("qwen3tts::sample_rows", mutates_args=())
def sample_rows_op(logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                   do_sample: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """The op body: Triton or reference, always a fresh int64 [bs] tensor (what the fake promises)."""
    return _route.run((logits, temperature, top_k, top_p, do_sample, keys), _reference_op,
                      wanted=wants_triton(logits))


@sample_rows_op.register_fake
def _sample_rows_fake(logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                      do_sample: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    return logits.new_empty((logits.shape[0],), dtype=torch.int64)


def sample_rows(logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                do_sample: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """int64 [bs]: every row's token over its whole vocabulary -- the argmax where do_sample is False,
    else the seeded pick from the temperature/top-k/top-p warped row (kernels/sample_rows_reference.py
    defines it). logits [bs, V] fp32/bf16/fp16; temperature [bs] float32 (> 0 where sampling); top_k
    [bs] int64 (0 = off); top_p [bs] float32 in (0, 1]; do_sample [bs] bool; keys [bs] int64 noise
    keys in [0, 2**32) (a strided view is fine)."""
    logits = _checked(logits, temperature, top_k, top_p, do_sample, keys)
    return sample_rows_op(logits, temperature, top_k, top_p, do_sample, keys)


def _checked(logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
             do_sample: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """check_args, then the logits the op takes (detached: an index has no gradient; the ops have no
    autograd formula)."""
    check_args(logits, temperature, top_k, top_p, do_sample, keys)
    return logits.detach() if logits.requires_grad and torch.is_grad_enabled() else logits


def _reference_gather_op(logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                         do_sample: torch.Tensor, keys: torch.Tensor, table_a: torch.Tensor,
                         table_b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    tokens = _reference_op(logits, temperature, top_k, top_p, do_sample, keys)
    return tokens, table_a[tokens], table_b[tokens]


@torch.library.custom_op("qwen3tts::sample_rows_gather", mutates_args=())
def sample_rows_gather_op(logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                          do_sample: torch.Tensor, keys: torch.Tensor, table_a: torch.Tensor,
                          table_b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """sample_rows_op, and the tokens' rows of table_a and table_b, all fresh tensors."""
    return _gather_route.run((logits, temperature, top_k, top_p, do_sample, keys, table_a, table_b),
                             _reference_gather_op, wanted=wants_triton(logits))


@sample_rows_gather_op.register_fake
def _sample_rows_gather_fake(logits, temperature, top_k, top_p, do_sample, keys, table_a, table_b):
    rows = logits.shape[0]
    return (logits.new_empty((rows,), dtype=torch.int64), table_a.new_empty((rows, table_a.shape[1])),
            table_b.new_empty((rows, table_b.shape[1])))


def sample_rows_gather(logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                       do_sample: torch.Tensor, keys: torch.Tensor, table_a: torch.Tensor,
                       table_b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """sample_rows, and each token's row of table_a [V, Wa] and table_b [V, Wb] (V = logits' vocabulary;
    the code predictor's next-step inputs: kernels/sample_rows_triton.py copies them in the sampling
    launch, two gather launches a step fewer) -> (tokens [bs], table_a[tokens], table_b[tokens])."""
    logits = _checked(logits, temperature, top_k, top_p, do_sample, keys)
    for name, table in (("table_a", table_a), ("table_b", table_b)):
        if table.dim() != 2 or table.shape[0] != logits.shape[-1] or table.device != logits.device:
            raise ValueError(f"sample_rows_gather: {name} must be [V={logits.shape[-1]}, W] on {logits.device}, "
                             f"got {tuple(table.shape)} on {table.device}")
    return sample_rows_gather_op(logits, temperature, top_k, top_p, do_sample, keys, table_a, table_b)
