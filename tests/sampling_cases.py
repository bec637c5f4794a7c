"""Inputs shared by the sampling kernel tests (tests/test_gumbel_pick.py, tests/warp_pick_cases.py):
per-row noise seeds and steps, the token-hash table, and codebook-0 logits as the talker makes them.
Each draws from the caller's generator in a fixed order, so a file's cases stay the same."""
from __future__ import annotations

import torch

# triton_support puts the repo root on sys.path (the interpreter children run without conftest.py)
import triton_support  # noqa: F401

from kernels import hash_noise as noise  # noqa: E402
from talker_service.model.sampling import penalize_and_mask  # noqa: E402

TABLE_SIZE = 4096  # token-hash table covering every token id the cases use
CODEBOOK0_VOCAB = 3072
CODEBOOK0_EOS = 2150


def seeds_steps(bs: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randint(0, 2**63 - 1, (bs,), generator=gen), torch.randint(0, 20000, (bs,), generator=gen)


def token_table() -> torch.Tensor:
    return noise.token_hashes(TABLE_SIZE, "cpu")


def codebook0_logits(bs: int, gen: torch.Generator) -> torch.Tensor:
    """[bs, 3072] codebook-0 logits after repetition penalty and masks: ids 2048.. suppressed but EOS,
    2% of the ids in each row's history."""
    logits = torch.randn(bs, CODEBOOK0_VOCAB, generator=gen) * 2.5
    history = torch.rand(bs, CODEBOOK0_VOCAB, generator=gen) < 0.02
    suppressed = torch.zeros(CODEBOOK0_VOCAB, dtype=torch.bool)
    suppressed[2048:] = True
    suppressed[CODEBOOK0_EOS] = False
    return penalize_and_mask(logits, history, torch.full((bs,), 1.05), torch.randint(0, 4, (bs,), generator=gen),
                             torch.full((bs,), 2), CODEBOOK0_EOS, suppressed)
