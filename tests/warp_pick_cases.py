"""Inputs shared by the warp_pick tests: sampling rows, noise keys, logit cases (ties, both filters,
greedy and sampled rows), the old unfused choose_tokens_keyed formula; seeds, the token-hash table
and codebook-0 logits come from tests/sampling_cases.py, as for the gumbel_pick tests."""
from __future__ import annotations

import torch

# (tests/triton_support.py, imported first by the test files, puts the repo root on sys.path)
from kernels import hash_noise as noise
from kernels.gumbel_pick_reference import gumbel_pick_reference
from kernels.warp_pick_reference import sampling_temperature, warp_values_reference
from talker_service.model.sampling import RowSampling, _sorted_candidates
from sampling_cases import codebook0_logits, seeds_steps as _seeds_steps
from sampling_cases import token_table as _table  # noqa: F401  (the test file takes it from here with the cases)



def _rows(bs, gen, top_ks, top_ps, temps, greedy_share=0.0):
    """Settings drawn per row; a share of greedy rows (do_sample False, temperature 0, as a request
    that does not sample may send it)."""
    pick = lambda options: torch.tensor(options)[torch.randint(0, len(options), (bs,), generator=gen)]  # noqa: E731
    do_sample = torch.rand(bs, generator=gen) >= greedy_share
    temperature = torch.where(do_sample, pick(temps).float(), torch.zeros(bs))
    return RowSampling(temperature=temperature, top_k=pick(top_ks).long(), top_p=pick(top_ps).float(),
                       do_sample=do_sample)


def _keys(bs, gen, group):
    return noise.group_keys(*_seeds_steps(bs, gen), 1, 15)[:, group - 1]  # a strided column, as the code predictor uses


def _logit_cases():
    """name -> (logits [bs, V], RowSampling, candidate_k, keys [bs]): what choose_tokens_keyed sees, fixed seeds."""
    gen = torch.Generator().manual_seed(2024)
    cases = {}
    # code predictor, candidate mode (top-64 of 2048); top_k 0 and > K clamp to K
    bs = 768
    rows = _rows(bs, gen, [0, 1, 5, 20, 50, 64, 100], [1.0, 0.95, 0.8, 0.5, 0.2], [0.5, 0.9, 1.3], 0.1)
    cases["cand64"] = (torch.randn(bs, 2048, generator=gen) * 3.0, rows, 64, _keys(bs, gen, 6))
    # logits on a 0.5 grid: the k-th value is shared with its neighbours, ties beyond k are kept
    bs = 256
    rows = _rows(bs, gen, [0, 3, 10, 37, 50, 64, 100], [1.0, 0.9, 0.7, 0.4], [0.7, 1.0, 0.3, 1.7], 0.1)
    cases["ties64"] = ((torch.randn(bs, 2048, generator=gen) * 4.0).round() / 2, rows, 64, _keys(bs, gen, 3))
    # logits on a grid of 2 (scaled by 1/temperature): flat runs of equal probabilities, so tail masses
    # hit 1 - top_p exactly in real arithmetic and rounding decides the top-p boundary
    bs = 384
    rows = _rows(bs, gen, [0, 5, 20, 50, 64], [0.9, 0.8, 0.5, 0.2], [0.6, 0.9, 1.3])
    cases["flat64"] = ((torch.randn(bs, 2048, generator=gen) * 1.5).round() * 2, rows, 64, _keys(bs, gen, 9))
    # the production case: bf16 logits (.float() of a bf16 head), temperatures that are not powers of 2
    bs = 256
    rows = _rows(bs, gen, [0, 1, 5, 20, 50, 64], [1.0, 0.95, 0.8, 0.5], [0.3, 0.9, 1.7], 0.25)
    logits = (torch.randn(bs, 2048, generator=gen) * 3.0).bfloat16().float()
    cases["bf16_cand64"] = (logits, rows, 64, _keys(bs, gen, 11))
    # full sort over 2048 (residual groups without candidate_k)
    bs = 48
    rows = _rows(bs, gen, [0, 1, 50, 200, 2048, 5000], [1.0, 0.9, 0.5], [0.7, 1.0, 0.3, 1.7], 0.2)
    cases["full2048"] = (torch.randn(bs, 2048, generator=gen) * 2.0, rows, None, _keys(bs, gen, 15))
    # codebook 0: penalties, EOS/suppressed masks (-inf tail), full sort over 3072
    bs = 48
    logits = codebook0_logits(bs, gen)
    rows = _rows(bs, gen, [0, 50, 3000], [1.0, 0.9, 0.6], [0.9, 1.0, 0.3, 1.7], 0.2)
    cases["c0_full3072"] = (logits, rows, None, noise.row_keys(*_seeds_steps(bs, gen), 0))
    return cases


def _old_choose_tokens_keyed(logits, rows, keys, candidate_k=None, hashes=None):
    """choose_tokens_keyed as it was before the temperature and the greedy select moved into warp_pick
    (its warp_pick then was the masks + pick of warp_values_reference + gumbel_pick_reference):
    7 launches per sampling, kept here as the definition the fused version must reproduce."""
    logits = logits.float()
    greedy = logits.argmax(dim=-1)
    temperature = torch.where(rows.do_sample, rows.temperature, torch.ones_like(rows.temperature))
    scaled = logits / temperature[:, None]
    if candidate_k is None or candidate_k >= logits.shape[-1]:
        values, token_ids = torch.sort(scaled, dim=-1, descending=True)
    else:
        values, token_ids = torch.topk(scaled, candidate_k, dim=-1)
    sampled = gumbel_pick_reference(warp_values_reference(values, rows.top_k, rows.top_p, logits.shape[-1]),
                                    token_ids, keys, hashes)
    return torch.where(rows.do_sample, sampled, greedy)


def _collapsed(logits, rows):
    """bool [bs]: rows where two different logits become one value when divided by the row's temperature
    (the one case where sorting raw logits may order candidates unlike sorting scaled ones)."""
    raw = logits.float().sort(dim=-1, descending=True).values
    scaled = raw / sampling_temperature(rows.temperature, rows.do_sample)[:, None]
    return ((raw[:, 1:] != raw[:, :-1]) & (scaled[:, 1:] == scaled[:, :-1])).any(dim=-1)


def _assert_old_tokens(new, old, logits, rows):
    """new == old in every row the division cannot reorder (see _collapsed; sampling.choose_tokens_keyed
    says why). The few collapsed rows of the random fp32 cases are left out: they match today (all rows
    of every case here do), but only because of torch's unspecified tie order."""
    kept = ~_collapsed(logits, rows)
    assert int(kept.sum()) >= 0.95 * len(kept), int((~kept).sum())  # rare: the check still covers the case
    assert torch.equal(new[kept], old[kept]), (new != old).nonzero().flatten().tolist()


def _sorted_case(logits, rows, candidate_k, keys):
    """The kernel's inputs as choose_tokens_keyed builds them: the raw logits' sorted candidates."""
    values, ids = _sorted_candidates(logits, candidate_k)
    return (values, ids, rows.temperature, rows.top_k, rows.top_p, rows.do_sample, logits.argmax(dim=-1),
            logits.shape[-1], keys)


def _head(case, num_rows):
    """The first rows of a kernel case (every tensor is per row; vocab_size is not)."""
    return tuple(t[:num_rows] if torch.is_tensor(t) else t for t in case)


def _sampling_rows(temperature, num_rows, gen, greedy_share):
    """(temperature, do_sample, greedy) for kernel cases built from sorted values directly: greedy rows
    send temperature 0 and a random token (not the first candidate), so a kernel that ignores
    do_sample or greedy cannot pass."""
    do_sample = torch.rand(num_rows, generator=gen) >= greedy_share
    return (torch.where(do_sample, temperature, torch.zeros(num_rows)), do_sample,
            torch.randint(0, 2048, (num_rows,), generator=gen))


def _special_case(gen):
    """Sorted rows at the edges: all -inf, one finite, NaN (sorted first), +inf, flat rows (exact
    probability ties at the top-p boundary), two equal values; one greedy row (temperature 0)."""
    raw = torch.full((9, 64), float("-inf"))
    raw[1, 5] = 0.5
    raw[2] = torch.randn(64, generator=gen)
    raw[2, [7, 20]] = float("nan")
    raw[3] = torch.randn(64, generator=gen)
    raw[3, [3, 40]] = float("inf")
    raw[4] = 1.0
    raw[5, :50] = 2.0
    raw[6, [10, 50]] = 1.0
    raw[7] = torch.randn(64, generator=gen)
    raw[8] = torch.randn(64, generator=gen)
    values, order = raw.sort(dim=-1, descending=True)
    ids = torch.stack([torch.randperm(2048, generator=gen)[:64] for _ in range(9)]).gather(1, order)
    temperature = torch.tensor([1.0, 0.3, 0.9, 1.7, 1.0, 0.3, 1.7, 0.9, 0.0])
    top_k = torch.tensor([0, 1, 5, 0, 10, 0, 2, 64, 5])
    top_p = torch.tensor([0.9, 1.0, 0.5, 0.9, 0.5, 0.9, 0.3, 0.6, 0.9])
    do_sample = torch.tensor([True] * 8 + [False])
    greedy = torch.tensor([0, 0, 0, 0, 0, 0, 0, 0, 1234])
    return (values, ids, temperature, top_k, top_p, do_sample, greedy, 2048,
            noise.row_keys(torch.arange(9) * 11, torch.full((9,), 4), 9))


def _cases():
    """name -> (values [bs, K] raw, sorted desc, token_ids, temperature, top_k, top_p, do_sample,
    greedy, vocab_size, keys): the kernel's inputs."""
    cases = {name: _sorted_case(*case) for name, case in _logit_cases().items()}
    gen = torch.Generator().manual_seed(77)
    cases["special"] = _special_case(gen)
    # other K: 1, non powers of two, the largest supported
    for k, bs in ((1, 3), (5, 4), (100, 6), (4096, 3)):
        values, ids = (torch.randn(bs, 4096, generator=gen) * 2.0).sort(dim=-1, descending=True)
        rows = _rows(bs, gen, [0, 1, 3, 80, 5000], [1.0, 0.9, 0.5], [1.0, 0.3, 0.9, 1.7])
        temperature, do_sample, greedy = _sampling_rows(rows.temperature, bs, gen, 0.3)
        cases[f"k{k}"] = (values[:, :k], ids[:, :k], temperature, rows.top_k, rows.top_p, do_sample, greedy, 4096,
                          noise.row_keys(*_seeds_steps(bs, gen), 1))
    # row strides larger than K (column slices of wider tensors), strided per-row settings and keys
    values, ids = (torch.randn(8, 80, generator=gen) * 2.0).sort(dim=-1, descending=True)
    params = torch.stack([torch.tensor([0, 3, 20, 64] * 2), torch.tensor([4, 0, 7, 9] * 2)], dim=1)
    top_p = torch.tensor([[0.9, 1.0, 0.5, 0.7] * 2, [0.0] * 8]).T
    temperature = torch.tensor([[0.3, 0.9, 1.7, 0.0] * 2, [5.0] * 8]).T
    do_sample = torch.tensor([[True, True, True, False] * 2, [False] * 8]).T
    greedy = torch.stack([torch.arange(8) * 131 + 7, torch.zeros(8, dtype=torch.long)], dim=1)
    cases["row_strided"] = (values[:, 8:72], ids[:, 8:72], temperature[:, 0], params[:, 0], top_p[:, 0],
                            do_sample[:, 0], greedy[:, 0], 2048, params[:, 1] * 977)
    return cases
