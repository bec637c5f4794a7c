"""Per-request sampling parameters and batched, graph-capturable token selection.

Codebook 0 (talker) follows the official HF processor order (facts §3.4, §8.9):
repetition penalty on past c0 tokens -> EOS masked before `min_new_tokens` samplings ->
suppressed ids [vocab-1024, vocab) except EOS -> temperature -> top-k -> top-p -> sample.
The code predictor uses its own temperature/top-k/top-p and none of the masks.

Every parameter is a per-row tensor, so one batch mixes requests with different settings, and
the random draw of a row is Gumbel noise hashed from (seed, step, group, token id)
(`kernels/hash_noise.py`): the same request samples the same tokens whatever shares its batch.
"""
from __future__ import annotations

import dataclasses
import secrets
from dataclasses import dataclass

import torch

from kernels import sample_rows
from kernels.warp_pick import warp_pick
from kernels.warp_pick_reference import sampling_temperature, warp_values_reference
from kernels.hash_noise import row_keys

_MAX_SEED = 2**63 - 1


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.9
    top_k: int = 50  # 0 = no top-k filter
    top_p: float = 1.0
    repetition_penalty: float = 1.05
    do_sample: bool = True
    subtalker_temperature: float = 0.9
    subtalker_top_k: int = 50
    subtalker_top_p: float = 1.0
    subtalker_dosample: bool = True
    min_new_tokens: int = 2
    max_new_tokens: int = 8192
    seed: int | None = None  # None: a random seed is drawn here, so every request has one to report

    def __post_init__(self):
        if self.seed is None:
            object.__setattr__(self, "seed", secrets.randbits(63))
        for prefix, temperature, top_k, top_p, do_sample in (
            ("", self.temperature, self.top_k, self.top_p, self.do_sample),
            ("subtalker_", self.subtalker_temperature, self.subtalker_top_k, self.subtalker_top_p, self.subtalker_dosample),
        ):
            if do_sample and not temperature > 0:
                raise ValueError(f"{prefix}temperature must be > 0 when sampling, got {temperature}")
            if top_k < 0:
                raise ValueError(f"{prefix}top_k must be >= 0 (0 disables it), got {top_k}")
            if not 0.0 < top_p <= 1.0:
                raise ValueError(f"{prefix}top_p must be in (0, 1], got {top_p}")
        if not self.repetition_penalty > 0:
            raise ValueError(f"repetition_penalty must be > 0, got {self.repetition_penalty}")
        if self.min_new_tokens < 0:
            raise ValueError(f"min_new_tokens must be >= 0, got {self.min_new_tokens}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if not 0 <= self.seed <= _MAX_SEED:
            raise ValueError(f"seed must be in [0, 2**63), got {self.seed}")

    @classmethod
    def from_generation_config(cls, generation_config: dict, **overrides) -> "SamplingParams":
        """Official precedence: explicit override > generation_config.json > hard default.
        Overrides set to None fall through to the JSON value."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(overrides) - names)
        if unknown:
            raise ValueError(f"unknown sampling parameter(s) {unknown}; valid: {sorted(names)}")
        values = {k: v for k, v in generation_config.items() if k in names}
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


@dataclass
class RowSampling:
    """Warper settings per batch row (all [bs])."""

    temperature: torch.Tensor  # float32
    top_k: torch.Tensor  # int64, 0 = off
    top_p: torch.Tensor  # float32
    do_sample: torch.Tensor  # bool

    @classmethod
    def from_params(cls, params: list[SamplingParams], device, subtalker: bool = False) -> "RowSampling":
        p = "subtalker_" if subtalker else ""
        return cls(
            temperature=torch.tensor([getattr(x, p + "temperature") for x in params], dtype=torch.float32, device=device),
            top_k=torch.tensor([getattr(x, p + "top_k") for x in params], dtype=torch.int64, device=device),
            top_p=torch.tensor([getattr(x, p + "top_p") for x in params], dtype=torch.float32, device=device),
            do_sample=torch.tensor([getattr(x, "subtalker_dosample" if subtalker else "do_sample") for x in params],
                                   dtype=torch.bool, device=device),
        )


def suppressed_with_eos(suppressed: torch.Tensor, eos_id: int) -> torch.Tensor:
    """bool [V]: `suppressed` with EOS masked too -- what a row that may not end yet must not sample."""
    return suppressed | (torch.arange(suppressed.shape[-1], device=suppressed.device) == eos_id)


def penalize_and_mask(logits: torch.Tensor, history: torch.Tensor, penalty: torch.Tensor, num_sampled: torch.Tensor,
                      min_new_tokens: torch.Tensor, eos_id: int, suppressed: torch.Tensor,
                      suppressed_eos: torch.Tensor | None = None) -> torch.Tensor:
    """Codebook-0 processors before the warpers.

    logits [bs, V] float32; history bool [bs, V] (c0 tokens this request already generated);
    penalty [bs]; num_sampled [bs] c0 samplings done before this one; min_new_tokens [bs];
    suppressed bool [V] (EOS must be False in it); suppressed_eos: suppressed_with_eos(suppressed,
    eos_id) if the caller keeps it (a constant: the frame step builds it once, not every frame).
    """
    penalty = penalty[:, None]
    penalized = torch.where(logits < 0, logits * penalty, logits / penalty)
    logits = torch.where(history, penalized, logits)
    if suppressed_eos is None:
        suppressed_eos = suppressed_with_eos(suppressed, eos_id)
    # rows before min_new_tokens mask EOS as well: a row-wise choice between two constant masks
    eos_blocked = (num_sampled < min_new_tokens)[:, None]
    return logits.masked_fill(torch.where(eos_blocked, suppressed_eos[None, :], suppressed[None, :]), float("-inf"))


def _sorted_candidates(logits: torch.Tensor, candidate_k: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The best candidates of each row, sorted descending: (values [bs, K], token ids [bs, K]).

    With candidate_k=None every token is a candidate (full sort, exact for any top_k). With a
    static candidate_k the sort is a top-k of that size, exact when every sampling row has
    1 <= top_k <= candidate_k (the caller guarantees it; `check_candidate_k` helps).
    """
    if candidate_k is None or candidate_k >= logits.shape[-1]:
        return torch.sort(logits, dim=-1, descending=True)
    return torch.topk(logits, candidate_k, dim=-1)


def _candidates(logits: torch.Tensor, rows: RowSampling, candidate_k: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Warped logits of the best candidates, sorted descending (values [bs, K], -inf where top-k or
    top-p drops them; token ids [bs, K]), in HF's order: temperature over the whole row, then the
    sort. The masking rules (HF's, ties at the k-th value kept, top-p mass summed from the tail) are
    written once, in kernels/warp_pick_reference.py."""
    scaled = logits / sampling_temperature(rows.temperature, rows.do_sample)[:, None]
    values, token_ids = _sorted_candidates(scaled, candidate_k)
    return warp_values_reference(values, rows.top_k, rows.top_p, logits.shape[-1]), token_ids


def warp_logits(logits: torch.Tensor, rows: RowSampling, candidate_k: int | None = None) -> torch.Tensor:
    """[bs, V] logits after temperature/top-k/top-p, -inf where filtered (for tests and debugging)."""
    values, token_ids = _candidates(logits, rows, candidate_k)
    out = torch.full_like(logits, float("-inf"))
    return out.scatter(1, token_ids, values)


def choose_tokens(logits: torch.Tensor, rows: RowSampling, seeds: torch.Tensor, steps: torch.Tensor, group: int,
                  candidate_k: int | None = None) -> torch.Tensor:
    """int64 [bs]: argmax for greedy rows, a seeded sample of the warped distribution otherwise.

    logits [bs, V] float32 after `penalize_and_mask` (codebook 0) or raw (residual groups);
    seeds/steps [bs] int64; group = codebook index (0..15), part of the noise key.
    """
    return choose_tokens_keyed(logits, rows, row_keys(seeds, steps, group), candidate_k)


def choose_tokens_and_rows(logits: torch.Tensor, rows: RowSampling, keys: torch.Tensor, tables: tuple,
                           candidate_k: int | None = None, hashes: torch.Tensor | None = None) -> tuple:
    """choose_tokens_keyed, and each chosen token's row of both `tables` ([V, W] each): on the GPU in
    the sampling launch itself (kernels/sample_rows.py sample_rows_gather), elsewhere by indexing.
    -> (tokens [bs], tables[0][tokens], tables[1][tokens])."""
    if sample_rows.wants_triton(logits):
        return sample_rows.sample_rows_gather(logits, rows.temperature, rows.top_k, rows.top_p, rows.do_sample,
                                              keys, *tables)
    tokens = choose_tokens_keyed(logits, rows, keys, candidate_k, hashes)
    return (tokens, *(table[tokens] for table in tables))


def choose_tokens_keyed(logits: torch.Tensor, rows: RowSampling, keys: torch.Tensor, candidate_k: int | None = None,
                        hashes: torch.Tensor | None = None) -> torch.Tensor:
    """choose_tokens with the rows' noise keys [bs] precomputed (noise.group_keys) and optionally
    the vocabulary's token hashes (noise.token_hashes): same tokens, fewer launches.

    On the GPU it is one launch over the whole row (kernels/sample_rows.py, no sort: its thresholds
    are found by bisection; the same tokens as the stable sort path below, the differences written
    in kernels/sample_rows_triton.py). Elsewhere (CPU, or after a recorded Triton failure) three:
    the greedy argmax, the topk/sort of the RAW logits, and warp_pick, which divides the K
    candidates by the row's temperature, masks (top-k, top-p), draws the Gumbel-max pick and writes
    the argmax instead in rows that do not sample.

    Sorting raw logits instead of logits / temperature (what HF and _candidates do) gives the same
    candidates in the same order, so the same tokens: an IEEE division by a positive temperature is
    correctly rounded, hence monotone, and as long as it maps distinct logits to distinct values the
    scaled row is ordered exactly like the raw one (ties stay ties, -0.0 stays below +0.0), and
    topk/sort, which only look at that order (comparisons; on CUDA also radix digits of the
    order-preserving float keys), return the same indices, ties included. warp_pick then divides
    each candidate with the same operands, so the values match bit for bit too. (NaN logits aside.)
    The one exception: two DIFFERENT logits of a sampling row that round to one fp32 value once
    divided -- less than 2 fp32 ulps apart with a temperature that is not a power of two, or both
    overflowing to inf / underflowing to 0. The raw sort then orders the pair by its raw values, the
    scaled sort by topk's unspecified tie order (and, its comparisons having changed, may order other
    ties of that row differently too), and the token can differ only where such a tie straddles the
    candidate_k cut or the top-p cut (or ties exactly in Gumbel score); tests/test_warp_pick.py
    builds such rows (2 of 512 tokens differed). Both are exact samples of the same warped
    distribution (the pair has one probability), the raw order a deterministic tie-break. It cannot
    happen on bf16 models short of overflow: the heads compute bf16 logits, .float() keeps their
    values, and distinct bf16 values are >= 2**16 fp32 ulps apart; only codebook 0's repetition
    penalty (fp32 products and quotients) can bring a penalized logit that close to another one.
    """
    if sample_rows.wants_triton(logits):
        # on the GPU: argmax, temperature, both masks and the pick over the WHOLE row in one launch
        # (kernels/sample_rows.py), instead of the float copy, argmax, sort/topk and warp_pick below;
        # exact for any top_k, so candidate_k (a speed knob of the sort path) is not needed there
        return sample_rows.sample_rows(logits, rows.temperature, rows.top_k, rows.top_p, rows.do_sample, keys)
    logits = logits.float()
    greedy = logits.argmax(dim=-1)
    values, token_ids = _sorted_candidates(logits, candidate_k)
    # temperature, top-k / top-p masks, the Gumbel-max pick (the same draws as hash_noise) and the
    # greedy select in one launch on the GPU (kernels/warp_pick.py; the same masks as _candidates)
    return warp_pick(values, token_ids, rows.temperature, rows.top_k, rows.top_p, rows.do_sample, greedy,
                     logits.shape[-1], keys, hashes)


def check_candidate_k(params: list[SamplingParams], candidate_k: int | None) -> None:
    """Refuse requests that a truncated candidate set would sample wrongly."""
    if candidate_k is None:
        return
    for x in params:
        for name, k, sample in (("top_k", x.top_k, x.do_sample), ("subtalker_top_k", x.subtalker_top_k, x.subtalker_dosample)):
            if sample and not 1 <= k <= candidate_k:
                raise ValueError(f"{name}={k} is not supported by this server (must be in [1, {candidate_k}])")
