"""TalkerModel.prefill_chunk (the capturable prefill of the service's prefill graphs) equals the
plain prefill: right padding to a token bucket, several prompts in one forward, padding rows on
one shared slot, and a prompt split into chunks whose later chunks read earlier ones back from
the cache. The KV rows written past a prompt's real length are never read before being overwritten."""
from __future__ import annotations

import pytest
import torch

from test_talker_model_support import max_diff, tiny_pair

TOL = 1e-5
H = 48


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    _, ours, _ = tiny_pair(tmp_path_factory.mktemp("talker_chunks"), "base", seed=7, max_slots=6, max_seq_len=48)
    return ours


def padded(prompts: list[torch.Tensor], length: int, num_rows: int | None = None) -> torch.Tensor:
    x = torch.zeros(num_rows or len(prompts), length, H)
    for i, p in enumerate(prompts):
        x[i, :p.shape[0]] = p
    return x


def last_rows(hidden: torch.Tensor, lengths: list[int]) -> torch.Tensor:
    return hidden[torch.arange(len(lengths)), torch.tensor(lengths) - 1]


@torch.no_grad()
def test_padded_batched_fresh_chunk_equals_single_prefills_and_decodes_the_same(model):
    torch.manual_seed(0)
    lengths = [4, 11, 7]
    prompts = [torch.randn(n, H) for n in lengths]
    singles = [model.prefill(p, slot) for slot, p in zip((0, 1, 2), prompts)]
    next_embeds = torch.randn(3, H)
    positions = torch.tensor(lengths)
    after_single = model.decode_step(next_embeds, torch.tensor([0, 1, 2]), positions)
    want_k = [model.cache.k[:, s, :, :n].clone() for s, n in zip((0, 1, 2), lengths)]
    # bucket of 16 tokens and 4 rows: the 4th row is padding on slot 5, like the runner's scratch slot
    slots = torch.tensor([3, 4, 1, 5])
    model.cache.k[:, 3:5].normal_()   # stale keys of an earlier occupant: must be overwritten or never read
    hidden = model.prefill_chunk(padded(prompts, 16, 4), slots, torch.zeros(4, dtype=torch.long))
    last = last_rows(hidden, lengths)
    for row, (h, logits) in enumerate(singles):
        assert max_diff(last[row], h) <= TOL
        assert max_diff(model.head(last[row]), logits) <= TOL
        got_k = model.cache.k[:, int(slots[row]), :, :lengths[row]]
        assert max_diff(got_k, want_k[row]) <= TOL
    # the padding written past each real length (positions len..15) is overwritten by the decode step
    # at position len before any query reads it
    after_chunk = model.decode_step(next_embeds, slots[:3], positions)
    assert max_diff(after_chunk[1], after_single[1]) <= TOL


@torch.no_grad()
def test_chunks_reading_earlier_chunks_back_equal_one_shot(model):
    torch.manual_seed(1)
    prompts = [torch.randn(n, H) for n in (13, 21)]
    whole = [model.prefill(p, slot) for slot, p in zip((0, 1), prompts)]
    # chunk 1: fresh, 8 positions each; chunk 2: per-row starts, different real lengths, bucket 16
    slots = torch.tensor([2, 3])
    model.prefill_chunk(padded([p[:8] for p in prompts], 8), slots, torch.zeros(2, dtype=torch.long))
    rest = [prompts[0][8:], prompts[1][8:]]                          # 5 and 13 positions
    starts = torch.tensor([8, 8])
    hidden = model.prefill_chunk(padded(rest, 16), slots, starts, span=48)
    last = last_rows(hidden, [5, 13])
    for row, (h, logits) in enumerate(whole):
        assert max_diff(last[row], h) <= TOL
        assert max_diff(model.head(last[row]), logits) <= TOL
    # different starts in one chunk, and padding that runs past the cache end (40 + 16 > 48) is clamped
    head, tail = torch.randn(40, H), torch.randn(3, H)
    model.prefill(head, 0)
    want_tail = model.prefill(tail, 0, start_position=40)
    model.prefill(head, 4)
    model.prefill_chunk(padded([prompts[1][:8]], 8), torch.tensor([5]), torch.zeros(1, dtype=torch.long))
    hidden = model.prefill_chunk(padded([tail, prompts[1][8:]], 16), torch.tensor([4, 5]), torch.tensor([40, 8]),
                                 span=48)
    last = last_rows(hidden, [3, 13])
    assert max_diff(last[0], want_tail[0]) <= TOL
    assert max_diff(last[1], whole[1][0]) <= TOL
    assert max_diff(model.cache.k[:, 4, :, :43], model.cache.k[:, 0, :, :43]) <= TOL


@torch.no_grad()
def test_prefill_chunk_reads_no_device_data_on_the_host():
    """On the meta device any host read of tensor data raises: both prefill kinds are capturable."""
    from checkpoint.configs import model_config
    from talker_service.model import TalkerConfig
    from talker_service.model.talker import build_empty

    config = TalkerConfig.from_dict(model_config("custom_voice", "tiny")["talker_config"])
    model = build_empty(config, "meta", torch.float32)
    model.init_runtime(max_slots=4, max_seq_len=32)
    index = torch.empty(3, dtype=torch.long, device="meta")
    for span in (None, 32):
        hidden = model.prefill_chunk(torch.empty(3, 16, H, device="meta"), index, index, span)
        assert hidden.shape == (3, 16, H)
