"""Per-frame noise keys dispatcher: one custom op, qwen3tts::noise_keys, backed by the fused Triton
kernel (kernels/noise_keys_triton.py) where it can run and by the eager reference
(kernels/hash_noise.group_keys, ~65 integer launches) elsewhere. talker_service.model.frame keys
all 16 samplings of a frame with it; torch.compile and dispatch-mode op counters see ONE op.

Routing, inside the op, in order:
1. CPU tensors -> eager reference, unless QWEN3_TTS_NOISEKEYS_CPU_TRITON=1 asks for the Triton path
   (tests set it with TRITON_INTERPRET=1 before triton is imported, so the kernel runs in the
   interpreter; without TRITON_INTERPRET the launch fails and that failure is recorded);
2. no rows -> eager reference;
3. a Triton failure was recorded earlier -> eager reference;
4. otherwise the Triton launcher. If importing triton, compiling or launching raises, the failure is
   logged once with its traceback, remembered for the life of the process, and this call and every
   later one use the eager reference.
Argument checks (shapes, dtypes, devices, group range; metadata only, no host sync) raise ValueError
before the op. The failure memory, lazy launcher import and device check live in kernels/triton_route.py.
"""
from __future__ import annotations

import torch

from kernels.noise_keys_reference import check_args, noise_keys_reference
from kernels.triton_route import TritonRoute

CPU_TRITON_ENV = "QWEN3_TTS_NOISEKEYS_CPU_TRITON"

_route = TritonRoute("noise_keys", "kernels.noise_keys_triton", "noise_keys_triton", CPU_TRITON_ENV, __name__)
triton_failure = _route.triton_failure
reset_triton_failure = _route.reset_failure


def _wants_triton(seeds: torch.Tensor) -> bool:
    return seeds.shape[0] > 0 and _route.allows(seeds)


@torch.library.custom_op("qwen3tts::noise_keys", mutates_args=())
def noise_keys_op(seeds: torch.Tensor, steps: torch.Tensor, first_group: int, num_groups: int) -> torch.Tensor:
    """The op body: Triton or reference, always a fresh contiguous int64 [bs, num_groups] (what the fake promises)."""
    return _route.run((seeds, steps, first_group, num_groups), noise_keys_reference, wanted=_wants_triton(seeds))


@noise_keys_op.register_fake
def _noise_keys_fake(seeds: torch.Tensor, steps: torch.Tensor, first_group: int, num_groups: int) -> torch.Tensor:
    return seeds.new_empty((seeds.shape[0], num_groups), dtype=torch.int64)


def noise_keys(seeds: torch.Tensor, steps: torch.Tensor, first_group: int, num_groups: int) -> torch.Tensor:
    """int64 [bs, num_groups]: the noise keys of groups first_group.. of every row, column j equal to
    hash_noise.row_keys(seeds, steps, first_group + j) -- hash_noise.group_keys in one op.

    seeds [bs] int64 request seeds in [0, 2**63) (a strided view is fine); steps [bs] int64 frame
    indices (only their low 32 bits count); first_group >= 0, num_groups >= 1.
    """
    check_args(seeds, steps, first_group, num_groups)
    return noise_keys_op(seeds, steps, first_group, num_groups)
