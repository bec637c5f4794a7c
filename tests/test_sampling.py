"""Batched sampling: HF processor parity, greedy, seeded draws independent of batch mates."""
from __future__ import annotations

import pytest
import torch
from transformers.generation.logits_process import (
    LogitsProcessorList,
    MinNewTokensLengthLogitsProcessor,
    RepetitionPenaltyLogitsProcessor,
    SuppressTokensLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from checkpoint.configs import generation_config
from talker_service.model.sampling import (RowSampling, SamplingParams, choose_tokens, penalize_and_mask,
                                           suppressed_with_eos, warp_logits)

VOCAB, EOS = 3072, 2150
SUPPRESSED = torch.zeros(VOCAB, dtype=torch.bool)
SUPPRESSED[2048:] = True
SUPPRESSED[EOS] = False
# (temperature, top_k, top_p, repetition_penalty, num_sampled) per row
ROWS = [(0.9, 50, 1.0, 1.05, 0), (0.7, 0, 0.8, 1.3, 1), (1.0, 1, 1.0, 1.5, 2), (1.3, 200, 0.5, 0.9, 5),
        (0.5, 3072, 0.95, 1.05, 3), (1.0, 0, 1.0, 1.0, 7)]


def rows_of(spec, do_sample=True) -> RowSampling:
    bs = len(spec)
    return RowSampling(
        temperature=torch.tensor([r[0] for r in spec], dtype=torch.float32),
        top_k=torch.tensor([r[1] for r in spec], dtype=torch.int64),
        top_p=torch.tensor([r[2] for r in spec], dtype=torch.float32),
        do_sample=torch.full((bs,), do_sample, dtype=torch.bool),
    )


def hf_processors(temperature, top_k, top_p, penalty, warpers=True, masks=True) -> LogitsProcessorList:
    """The list HF generate builds for the official talker call (utils._get_logits_processor order)."""
    procs = LogitsProcessorList()
    if masks:
        procs.append(RepetitionPenaltyLogitsProcessor(penalty=penalty))
        procs.append(MinNewTokensLengthLogitsProcessor(prompt_length_to_skip=0, min_new_tokens=2, eos_token_id=EOS))
        procs.append(SuppressTokensLogitsProcessor([i for i in range(2048, VOCAB) if i != EOS]))
    if warpers:
        if temperature != 1.0:
            procs.append(TemperatureLogitsWarper(temperature))
        if top_k != 0:
            procs.append(TopKLogitsWarper(top_k))
        if top_p < 1.0:
            procs.append(TopPLogitsWarper(top_p))
    return procs


def random_case(seed: int):
    gen = torch.Generator().manual_seed(seed)
    logits = 3.0 * torch.randn(len(ROWS), VOCAB, generator=gen)
    # previously generated c0 tokens, with repeats, as HF sees them (its input_ids)
    # with the row's best tokens among them, so the penalty changes what survives the warpers
    best = logits[:, :2048].topk(3, dim=-1).indices
    generated = [torch.cat((best[row, : min(r[4], 3)], torch.randint(0, 2048, (r[4] - min(r[4], 3),), generator=gen)))
                 for row, r in enumerate(ROWS)]
    history = torch.zeros(len(ROWS), VOCAB, dtype=torch.bool)
    for row, ids in enumerate(generated):
        history[row, ids] = True
    return logits, generated, history


def ours_processed(logits, history, warp=True, candidate_k=None):
    penalty = torch.tensor([r[3] for r in ROWS])
    num_sampled = torch.tensor([r[4] for r in ROWS])
    masked = penalize_and_mask(logits, history, penalty, num_sampled, torch.full((len(ROWS),), 2), EOS, SUPPRESSED)
    return warp_logits(masked, rows_of(ROWS), candidate_k) if warp else masked


def test_penalize_and_mask_with_a_prebuilt_eos_mask_equals_the_per_call_formula():
    """The frame step passes suppressed_with_eos built once; the result is bit for bit the formula that
    built the EOS mask in every call (arange == eos, & rows before min_new_tokens, | suppressed)."""
    gen = torch.Generator().manual_seed(3)
    bs = 12
    logits = torch.randn(bs, VOCAB, generator=gen) * 3.0
    history = torch.rand(bs, VOCAB, generator=gen) < 0.05
    penalty = torch.rand(bs, generator=gen) + 0.6
    num_sampled = torch.arange(bs) % 4          # rows before, at and after min_new_tokens
    min_new = torch.full((bs,), 2)
    penalized = torch.where(logits < 0, logits * penalty[:, None], logits / penalty[:, None])
    expected = torch.where(history, penalized, logits)
    eos_blocked = (num_sampled < min_new)[:, None] & (torch.arange(VOCAB) == EOS)[None, :]
    expected = expected.masked_fill(eos_blocked | SUPPRESSED[None, :], float("-inf"))
    prebuilt = suppressed_with_eos(SUPPRESSED, EOS)
    assert prebuilt.sum() == SUPPRESSED.sum() + 1 and bool(prebuilt[EOS]) and not bool(SUPPRESSED[EOS])
    for suppressed_eos in (None, prebuilt):
        out = penalize_and_mask(logits, history, penalty, num_sampled, min_new, EOS, SUPPRESSED, suppressed_eos)
        assert torch.equal(out, expected)
    assert torch.isinf(expected[num_sampled < 2, EOS]).all() and torch.isfinite(expected[num_sampled >= 2, EOS]).all()


def assert_same_logits(ours: torch.Tensor, ref: torch.Tensor):
    assert torch.equal(torch.isinf(ours), torch.isinf(ref))
    finite = torch.isfinite(ref)
    assert finite.any()
    torch.testing.assert_close(ours[finite], ref[finite], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_processors_match_hf_list(seed):
    logits, generated, history = random_case(seed)
    ours = ours_processed(logits, history)
    for row, (temperature, top_k, top_p, penalty, _) in enumerate(ROWS):
        ref = hf_processors(temperature, top_k, top_p, penalty)(generated[row][None], logits[row:row + 1].clone())
        assert_same_logits(ours[row:row + 1], ref)


def test_penalty_and_masks_match_hf_before_warpers():
    logits, generated, history = random_case(3)
    logits[:, :2048] = logits[:, :2048].abs() * torch.sign(torch.randn(len(ROWS), 2048))  # both signs
    ours = ours_processed(logits, history, warp=False)
    for row, (_, _, _, penalty, _) in enumerate(ROWS):
        ref = hf_processors(1.0, 0, 1.0, penalty, warpers=False)(generated[row][None], logits[row:row + 1].clone())
        assert_same_logits(ours[row:row + 1], ref)
    assert torch.isinf(ours[:, 2048:]).sum() == len(ROWS) * 1023 + sum(r[4] < 2 for r in ROWS)


def test_subtalker_warpers_match_hf_without_masks():
    logits, _, _ = random_case(4)
    logits = logits[:, :2048]
    ours = warp_logits(logits, rows_of(ROWS))
    for row, (temperature, top_k, top_p, _, _) in enumerate(ROWS):
        ref = hf_processors(temperature, top_k, top_p, 1.0, masks=False)(torch.zeros(1, 0, dtype=torch.long), logits[row:row + 1].clone())
        assert_same_logits(ours[row:row + 1], ref)


def test_candidate_k_equals_full_sort_when_top_k_fits():
    logits, _, history = random_case(5)
    spec = [(0.9, 50, 1.0), (0.7, 3, 0.8), (1.2, 64, 0.5), (1.0, 1, 1.0)]
    rows = rows_of([(t, k, p, 1.0, 0) for t, k, p in spec])
    full = warp_logits(logits[:4], rows)
    truncated = warp_logits(logits[:4], rows, candidate_k=64)
    assert torch.equal(torch.isinf(full), torch.isinf(truncated))
    torch.testing.assert_close(full[torch.isfinite(full)], truncated[torch.isfinite(full)])
    seeds, steps = torch.arange(4) * 7919, torch.full((4,), 3)
    assert torch.equal(choose_tokens(logits[:4], rows, seeds, steps, 0),
                       choose_tokens(logits[:4], rows, seeds, steps, 0, candidate_k=64))


def test_greedy_is_argmax_after_processors():
    logits, generated, history = random_case(6)
    masked = ours_processed(logits, history, warp=False)
    greedy = choose_tokens(masked, rows_of(ROWS, do_sample=False), torch.zeros(6, dtype=torch.long),
                           torch.zeros(6, dtype=torch.long), 0)
    for row, (_, _, _, penalty, _) in enumerate(ROWS):
        ref = hf_processors(1.0, 0, 1.0, penalty, warpers=False)(generated[row][None], logits[row:row + 1].clone())
        assert int(greedy[row]) == int(ref.argmax())
    assert int(greedy.max()) < 2048 or EOS in greedy.tolist()


def test_top_k_one_equals_greedy():
    logits = 2.0 * torch.randn(16, VOCAB, generator=torch.Generator().manual_seed(7))
    rows = rows_of([(0.8, 1, 1.0, 1.0, 0)] * 16)
    sampled = choose_tokens(logits, rows, torch.arange(16) + 100, torch.arange(16), 0)
    assert torch.equal(sampled, logits.argmax(-1))


def test_seeded_sampling_does_not_depend_on_batch_mates():
    gen = torch.Generator().manual_seed(8)
    logits = torch.randn(1, VOCAB, generator=gen)  # flat enough that the draw matters
    spec = [(0.9, 0, 0.9, 1.0, 0)]
    alone = [choose_tokens(logits, rows_of(spec), torch.tensor([1234]), torch.tensor([step]), 0) for step in range(20)]
    for trial in range(5):
        num_mates = int(torch.randint(1, 9, (1,), generator=gen))
        row = int(torch.randint(0, num_mates + 1, (1,), generator=gen))
        mates = torch.randn(num_mates, VOCAB, generator=gen)
        batch = torch.cat((mates[:row], logits, mates[row:]))
        mate_spec = [(float(torch.rand(1, generator=gen)) + 0.3, int(torch.randint(0, 100, (1,), generator=gen)),
                      1.0, 1.0, 0) for _ in range(num_mates)]
        rows = rows_of(mate_spec[:row] + spec + mate_spec[row:])
        seeds = torch.randint(0, 2**62, (num_mates + 1,), generator=gen)
        seeds[row] = 1234
        for step in range(20):
            steps = torch.randint(0, 500, (num_mates + 1,), generator=gen)
            steps[row] = step
            assert int(choose_tokens(batch, rows, seeds, steps, 0)[row]) == int(alone[step]), (trial, step)


def test_different_seeds_steps_and_groups_differ():
    logits = torch.zeros(1, 2048)  # uniform: every draw is pure noise
    rows = rows_of([(1.0, 0, 1.0, 1.0, 0)])

    def draws(seed, group=0):
        return [int(choose_tokens(logits, rows, torch.tensor([seed]), torch.tensor([s]), group)) for s in range(32)]

    assert draws(1) == draws(1)
    assert draws(1) != draws(2)
    assert draws(1) != draws(1, group=5)
    assert len(set(draws(1))) > 20  # steps are not reusing one draw


def test_sampling_frequencies_follow_the_warped_distribution():
    logits = torch.tensor([[2.0, 1.0, 0.5, 0.0, -1.0, -3.0, 0.2, 1.5]])
    n = 40000
    rows = rows_of([(0.8, 5, 1.0, 1.0, 0)] * n)
    tokens = choose_tokens(logits.expand(n, -1), rows, torch.arange(n) * 104729 + 17, torch.zeros(n, dtype=torch.long), 3)
    expected = warp_logits(logits, rows_of([(0.8, 5, 1.0, 1.0, 0)])).softmax(-1)[0]
    observed = torch.bincount(tokens, minlength=8).float() / n
    assert observed[expected == 0].sum() == 0  # filtered tokens never drawn
    assert (observed - expected).abs().max() < 0.01


def test_eos_is_never_sampled_in_the_first_two_steps():
    logits = torch.randn(8, VOCAB)
    logits[:, EOS] = 50.0  # EOS overwhelmingly likely
    history = torch.zeros(8, VOCAB, dtype=torch.bool)
    rows = rows_of([(0.9, 50, 1.0, 1.0, 0)] * 8)
    for step, expect_eos in ((0, False), (1, False), (2, True), (9, True)):
        steps = torch.full((8,), step)
        masked = penalize_and_mask(logits, history, torch.ones(8), steps, torch.full((8,), 2), EOS, SUPPRESSED)
        tokens = choose_tokens(masked, rows, torch.arange(8), steps, 0)
        assert bool((tokens == EOS).all()) == expect_eos, step
        assert int(tokens.max()) < 2048 or expect_eos  # suppressed ids never appear


def test_params_from_generation_config_and_validation():
    defaults = SamplingParams.from_generation_config(generation_config(), seed=5)
    assert (defaults.temperature, defaults.top_k, defaults.top_p, defaults.repetition_penalty) == (0.9, 50, 1.0, 1.05)
    assert (defaults.subtalker_temperature, defaults.subtalker_top_k, defaults.subtalker_dosample) == (0.9, 50, True)
    assert (defaults.min_new_tokens, defaults.max_new_tokens, defaults.seed) == (2, 8192, 5)
    custom = SamplingParams.from_generation_config(generation_config(), top_k=None, temperature=0.5, do_sample=False)
    assert (custom.top_k, custom.temperature, custom.do_sample) == (50, 0.5, False)
    assert SamplingParams().seed != SamplingParams().seed  # drawn when not given
    with pytest.raises(ValueError, match="unknown sampling parameter"):
        SamplingParams.from_generation_config({}, topk=3)
    for bad, message in (({"temperature": 0.0}, "temperature must be > 0"), ({"top_p": 0.0}, "top_p must be in"),
                         ({"subtalker_top_k": -1}, "subtalker_top_k must be >= 0"), ({"seed": -1}, "seed must be in"),
                         ({"repetition_penalty": 0.0}, "repetition_penalty")):
        with pytest.raises(ValueError, match=message):
            SamplingParams(**bad)
    assert SamplingParams(temperature=0.0, do_sample=False).temperature == 0.0  # greedy ignores temperature


def test_counter_noise_is_uniform_and_uncorrelated():
    from kernels.hash_noise import row_keys, uniform_for_tokens

    keys = row_keys(torch.arange(500, dtype=torch.long) * 31337, torch.arange(500) % 7, 2)
    u = uniform_for_tokens(keys, torch.arange(2048).expand(500, -1))  # 1M draws
    assert 0.0 < float(u.min()) and float(u.max()) < 1.0
    assert abs(float(u.mean()) - 0.5) < 2e-3 and abs(float(u.var()) - 1 / 12) < 2e-3
    counts = torch.histc(u, bins=32, min=0.0, max=1.0)
    assert float((counts / counts.mean() - 1).abs().max()) < 0.03
    centered = u - 0.5
    for a, b in ((centered[:, 1:], centered[:, :-1]), (centered[1:], centered[:-1])):  # neighbouring tokens / keys
        assert abs(float((a * b).mean()) * 12) < 0.01


def test_slot_table_gathers_rows_and_records_history():
    from talker_service.model import SlotSamplingTable

    table = SlotSamplingTable(4, VOCAB, "cpu")
    table.assign(2, SamplingParams(temperature=0.5, top_k=7, subtalker_top_p=0.3, seed=99, repetition_penalty=1.2))
    table.assign(0, SamplingParams(do_sample=False, seed=1))
    rows = table.gather(torch.tensor([2, 0]))
    assert rows.talker.temperature.tolist() == pytest.approx([0.5, 0.9]) and rows.talker.top_k.tolist() == [7, 50]
    assert rows.talker.do_sample.tolist() == [True, False]
    assert rows.subtalker.top_p.tolist() == pytest.approx([0.3, 1.0])
    assert rows.seeds.tolist() == [99, 1] and rows.repetition_penalty.tolist() == pytest.approx([1.2, 1.05])
    table.record(torch.tensor([2, 0]), torch.tensor([5, 6]))
    table.record(torch.tensor([2]), torch.tensor([9]))
    assert table.history[2].nonzero().flatten().tolist() == [5, 9]
    assert table.history[0].nonzero().flatten().tolist() == [6]
    table.assign(2, SamplingParams(seed=3))
    assert not table.history[2].any()  # a new request starts without history
    with pytest.raises(ValueError, match="slot 4 out of range"):
        table.assign(4, SamplingParams())


def test_slot_table_gathers_every_field_in_three_launches():
    """One index_select per dtype table (float32, int64, bool) instead of one per field, and every
    gathered field equals the per-field gather it replaced; the history's extra flag columns never
    show in the history."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from talker_service.model import SlotSamplingTable

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.names = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.names.append(str(func.overloadpacket))
            return func(*args, **(kwargs or {}))

    table = SlotSamplingTable(6, VOCAB, "cpu")
    table.assign(4, SamplingParams(temperature=0.7, top_k=3, top_p=0.8, repetition_penalty=1.3, do_sample=False,
                                   subtalker_temperature=1.1, subtalker_top_k=9, subtalker_top_p=0.6,
                                   subtalker_dosample=True, min_new_tokens=5, seed=2**62 + 7))
    table.assign(1, SamplingParams(seed=11, subtalker_dosample=False))
    table.record(torch.tensor([4, 1]), torch.tensor([VOCAB - 1, 0]))
    slots = torch.tensor([4, 1, 4])
    with Ops() as ops:
        rows = table.gather(slots)
    launching = [name for name in ops.names if name not in ("aten.unbind", "aten.slice", "aten.select")]
    assert launching == ["aten.index_select"] * 3, ops.names
    expected = {
        "temperature": (rows.talker.temperature, table.temperature), "top_k": (rows.talker.top_k, table.top_k),
        "top_p": (rows.talker.top_p, table.top_p), "do_sample": (rows.talker.do_sample, table.do_sample),
        "sub_temperature": (rows.subtalker.temperature, table.sub_temperature),
        "sub_top_k": (rows.subtalker.top_k, table.sub_top_k), "sub_top_p": (rows.subtalker.top_p, table.sub_top_p),
        "sub_do_sample": (rows.subtalker.do_sample, table.sub_do_sample),
        "repetition_penalty": (rows.repetition_penalty, table.repetition_penalty),
        "min_new_tokens": (rows.min_new_tokens, table.min_new_tokens), "seeds": (rows.seeds, table.seeds),
        "history": (rows.history, table.history),
    }
    for name, (gathered, field) in expected.items():
        assert gathered.dtype == field.dtype and torch.equal(gathered, field.index_select(0, slots)), name
    assert rows.history.shape == (3, VOCAB) and rows.history[0].nonzero().flatten().tolist() == [VOCAB - 1]
    assert rows.talker.do_sample.tolist() == [False, True, False]
    assert rows.subtalker.do_sample.tolist() == [True, False, True]
    assert rows.seeds.tolist() == [2**62 + 7, 11, 2**62 + 7]


def test_batched_group_keys_and_token_hash_table_give_the_same_noise():
    from kernels.hash_noise import group_keys, row_keys, token_hashes, uniform_for_tokens

    seeds = torch.tensor([0, 1, 2**62 + 12345, 2**63 - 1, 987654321])
    steps = torch.tensor([0, 5, 1999, 7, 2**31 + 3])
    keys = group_keys(seeds, steps, 1, 15)
    assert keys.shape == (5, 15)
    assert torch.equal(keys, torch.stack([row_keys(seeds, steps, g) for g in range(1, 16)], dim=1))
    token_ids = torch.randint(0, 2048, (5, 64), generator=torch.Generator().manual_seed(0))
    table = token_hashes(2048, "cpu")
    assert torch.equal(uniform_for_tokens(keys[:, 3], token_ids, table), uniform_for_tokens(keys[:, 3], token_ids))


def test_assign_many_writes_what_assign_writes():
    """A burst's admissions in one write per table give the same rows (parameters, seeds, flags,
    cleared history) as one assign() per slot."""
    from talker_service.model.slot_sampling import SlotSamplingTable

    params = [SamplingParams(temperature=0.7, top_k=20, top_p=0.9, repetition_penalty=1.1, seed=2**62 + 5,
                             do_sample=False, subtalker_temperature=1.3, subtalker_top_k=7, subtalker_top_p=0.5,
                             subtalker_dosample=True, min_new_tokens=4),
              SamplingParams(seed=11), SamplingParams(subtalker_dosample=False, seed=0)]
    one, many = SlotSamplingTable(6, 32, "cpu"), SlotSamplingTable(6, 32, "cpu")
    for table in (one, many):
        table.history[:] = True   # stale history of earlier requests must be cleared
    for slot, p in zip([4, 0, 2], params):
        one.assign(slot, p)
    many.assign_many([4, 0, 2], params)
    for name in ("_floats", "_ints", "_bools"):
        assert torch.equal(getattr(one, name), getattr(many, name)), name
    assert int(many.seeds[4]) == 2**62 + 5 and not bool(many.history[4].any()) and bool(many.history[1].all())
    assert not bool(many.do_sample[4]) and bool(many.sub_do_sample[4]) and float(many.temperature[4]) == pytest.approx(0.7)
    with pytest.raises(ValueError, match="out of range"):
        many.assign_many([6], [params[0]])
    with pytest.raises(ValueError, match="2 slots for 1"):
        many.assign_many([1, 2], [params[0]])
