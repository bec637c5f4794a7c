"""Static slot cache behaviour: batched decode over rows at different lengths equals each row
decoded alone; batch prefill and chunked prefill equal the plain paths; what lies past a row's length is never read."""
from __future__ import annotations

import pytest
import torch

from test_talker_model_support import max_diff, tiny_pair

TOL = 1e-5


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    _, ours, _ = tiny_pair(tmp_path_factory.mktemp("talker_batch"), "base", seed=5, max_slots=6, max_seq_len=48)
    return ours


def decode_alone(model, slot: int, prompt: torch.Tensor, steps: list[torch.Tensor]):
    hidden, logits = model.prefill(prompt, slot)
    outs = [(hidden, logits)]
    for i, embeds in enumerate(steps):
        h, lg = model.decode_step(embeds[None], torch.tensor([slot]), torch.tensor([prompt.shape[0] + i]))
        outs.append((h[0], lg[0]))
    return outs


@torch.no_grad()
def test_batched_decode_rows_at_different_lengths_equal_alone(model):
    torch.manual_seed(0)
    lengths = [3, 9, 14]
    slots = [4, 0, 2]  # deliberately not 0..bs-1
    prompts = [torch.randn(n, 48) for n in lengths]
    num_steps = 5
    step_inputs = [[torch.randn(48) for _ in range(num_steps)] for _ in lengths]
    alone = [decode_alone(model, s, p, x) for s, p, x in zip(slots, prompts, step_inputs)]
    # the same requests again, now advanced together; slot 5 holds an unrelated request
    model.prefill(torch.randn(20, 48), 5)
    for slot, prompt in zip(slots, prompts):
        model.prefill(prompt, slot)
    slot_t = torch.tensor(slots + [5])
    for i in range(num_steps):
        embeds = torch.stack([x[i] for x in step_inputs] + [torch.randn(48)])
        positions = torch.tensor([n + i for n in lengths] + [20 + i])
        hidden, logits = model.decode_step(embeds, slot_t, positions)
        for row in range(len(slots)):
            ref_hidden, ref_logits = alone[row][i + 1]
            assert max_diff(hidden[row], ref_hidden) <= TOL, (row, i)
            assert max_diff(logits[row], ref_logits) <= TOL, (row, i)


@torch.no_grad()
def test_decode_ignores_cache_rows_past_each_length(model):
    """The decode graphs have no context bucket: a step must read nothing past a row's position, so
    stale keys there (a padded prefill's padding, a freed slot's old request) change nothing."""
    torch.manual_seed(1)
    model.prefill(torch.randn(6, 48), 1)
    model.prefill(torch.randn(10, 48), 3)
    embeds = torch.randn(2, 48)
    slots, positions = torch.tensor([1, 3]), torch.tensor([6, 10])
    saved = model.cache.k.clone(), model.cache.v.clone()
    clean = model.decode_step(embeds, slots, positions)
    model.cache.k.copy_(saved[0])
    model.cache.v.copy_(saved[1])
    for slot, position in ((1, 6), (3, 10)):   # garbage from the step's own position to the end
        model.cache.k[:, slot, :, position:] = 1e3 * torch.randn_like(model.cache.k[:, slot, :, position:])
        model.cache.v[:, slot, :, position:] = 1e3 * torch.randn_like(model.cache.v[:, slot, :, position:])
    stale = model.decode_step(embeds, slots, positions)
    assert torch.equal(clean[1], stale[1])


@torch.no_grad()
def test_prefill_batch_equals_single_prefills(model):
    torch.manual_seed(2)
    prompts = [torch.randn(n, 48) for n in (4, 12, 7)]
    singles = [model.prefill(p, slot) for slot, p in zip((0, 1, 2), prompts)]
    next_embeds = torch.randn(3, 48)
    positions = torch.tensor([4, 12, 7])
    after_single = model.decode_step(next_embeds, torch.tensor([0, 1, 2]), positions)
    hidden, logits = model.prefill_batch(prompts, [3, 4, 5])
    for row, (h, lg) in enumerate(singles):
        assert max_diff(hidden[row], h) <= TOL
        assert max_diff(logits[row], lg) <= TOL
    # the cache rows written by the padded batch serve later decode steps identically
    after_batch = model.decode_step(next_embeds, torch.tensor([3, 4, 5]), positions)
    assert max_diff(after_batch[1], after_single[1]) <= TOL


@torch.no_grad()
def test_chunked_prefill_equals_one_shot(model):
    torch.manual_seed(3)
    prompt = torch.randn(13, 48)
    whole = model.prefill(prompt, 0)
    model.prefill(prompt[:5], 1)
    chunked = model.prefill(prompt[5:], 1, start_position=5)
    assert max_diff(whole[0], chunked[0]) <= TOL
    assert max_diff(whole[1], chunked[1]) <= TOL


def test_slot_and_length_limits_are_named(model):
    with pytest.raises(ValueError, match="slot 6 out of range"):
        model.prefill(torch.randn(3, 48), 6)
    with pytest.raises(ValueError, match="exceeds the KV cache's max_seq_len 48"):
        model.prefill(torch.randn(49, 48), 0)
    with pytest.raises(ValueError, match="distinct slot"):
        model.prefill_batch([torch.randn(3, 48)] * 2, [1, 1])
