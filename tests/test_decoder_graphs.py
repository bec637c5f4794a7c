"""GraphedStep bucketing and padding (the CUDA capture itself runs in benchmarks/bench_decoder.py).

On CPU the buckets run the step body eagerly on the same static, padded buffers that a captured
graph would read, so these tests cover everything but the capture call.
"""
from __future__ import annotations

import pytest
import torch

from test_decoder_fixtures import random_codes, single_thread, tiny_code2wav  # noqa: F401 (single_thread: autouse fixture)
from vocoder_service.codec import StreamingDecoder
from vocoder_service.codec.graphs import GraphedStep

SPF = 1920


@pytest.fixture(scope="module")
def model():
    return tiny_code2wav()


def test_bucket_choice_and_limits(model):
    graphed = GraphedStep(StreamingDecoder(model, max_slots=4), batch_sizes=[4, 1, 2], chunk_frames=[5, 2])
    assert graphed.bucket_for(1, 1) == (1, 2)
    assert graphed.bucket_for(3, 3) == (4, 5)
    with pytest.raises(ValueError, match="exceeds the largest captured batch size 4"):
        graphed.bucket_for(5, 1)
    with pytest.raises(ValueError, match="exceeds the largest captured chunk 5"):
        graphed.bucket_for(1, 6)


def test_padded_buckets_stream_exactly_and_only_touch_the_scratch_slot(model):
    codes = {0: random_codes(1, 9, seed=61)[0], 3: random_codes(1, 6, seed=62)[0]}
    reference = {slot: model.decode(c.unsqueeze(0))[0] for slot, c in codes.items()}
    decoder = StreamingDecoder(model, max_slots=5)
    graphed = GraphedStep(decoder, batch_sizes=[1, 4], chunk_frames=[2, 5])
    graphed.capture()
    # (slots in row order, frames per row): bs 1 or 2 rows padded to B=4; t padded to 2 or 5.
    schedule = [([3], [1]), ([0, 3], [2, 2]), ([0], [4]), ([3, 0], [3, 3])]
    done = {0: 0, 3: 0}
    streamed = {0: [], 3: []}
    for slots, sizes in schedule:
        width = max(sizes)
        chunk = torch.full((len(slots), 16, width), 7)
        for row, (slot, size) in enumerate(zip(slots, sizes)):
            chunk[row, :, :size] = codes[slot][:, done[slot] : done[slot] + size]
        pcm = graphed(chunk, torch.tensor(slots), torch.tensor(sizes)).clone()
        assert pcm.shape == (len(slots), width * SPF)
        for row, (slot, size) in enumerate(zip(slots, sizes)):
            streamed[slot].append(pcm[row, : size * SPF])
            done[slot] += size
    for slot in codes:
        assert done[slot] == codes[slot].shape[1]
        assert (torch.cat(streamed[slot]) - reference[slot]).abs().max().item() <= 1e-4
    for unused in (1, 2, 4):  # padding rows went to the scratch slot (index 5), never here
        assert decoder.positions[unused] == 0
        assert all(torch.count_nonzero(pool[unused]) == 0 for pool in decoder.pools.values())
    assert decoder.positions[decoder.scratch_slot] > 0


def test_rejected_call_leaves_state_untouched(model):
    decoder = StreamingDecoder(model, max_slots=2)
    graphed = GraphedStep(decoder, batch_sizes=[2], chunk_frames=[2])
    graphed(random_codes(1, 2, seed=3), [0])
    before = {k: v.clone() for k, v in decoder.pools.items()}
    with pytest.raises(ValueError, match="duplicate slots"):
        graphed(random_codes(2, 2, seed=4), [1, 1])
    assert all(torch.equal(before[k], decoder.pools[k]) for k in before)
