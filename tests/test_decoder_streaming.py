"""StreamingDecoder == offline decode, for any chunking, batch mates, padding and slot reuse."""
from __future__ import annotations

import random

import pytest
import torch

from test_decoder_fixtures import random_codes, single_thread, tiny_code2wav  # noqa: F401 (single_thread: autouse fixture)
from vocoder_service.codec import StreamingDecoder

SPF = 1920
TOLERANCE = 1e-4
# Request name -> frames. "a" is longer than the 72-frame attention window.
FRAMES = {"a": 150, "b": 30, "c": 12, "d": 75}


@pytest.fixture(scope="module", params=["channel-major", "time-major"])
def model(request):
    """The tiny decoder in each activation layout (vocoder_service/codec/layout.py): every property
    below holds in both, the offline reference being decoded in the same layout."""
    model = tiny_code2wav()
    model.time_major = request.param == "time-major"
    return model


@pytest.fixture(scope="module")
def requests(model):
    """name -> (codes [16, T], offline pcm [T*1920]); each offline decode is one exact forward."""
    out = {}
    for i, (name, frames) in enumerate(FRAMES.items()):
        codes = random_codes(1, frames, seed=100 + i)
        out[name] = (codes[0], model.decode(codes)[0])
    return out


def max_error(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.shape == b.shape, (a.shape, b.shape)
    return (a - b).abs().max().item()


def stream(decoder, codes, slot, chunking):
    """Feed codes [16, T] to one slot in chunks; returns the concatenated pcm."""
    pieces, pos = [], 0
    for size in chunking:
        pieces.append(decoder.step(codes[None, :, pos : pos + size], [slot])[0])
        pos += size
    assert pos == codes.shape[1]
    return torch.cat(pieces)


def test_single_request_chunkings_match_offline(model, requests):
    codes, reference = requests["a"]
    total = codes.shape[1]
    chunkings = [[1, 2, 3, 7, 25, 50, 62]]
    for seed in range(2):
        rng, sizes = random.Random(seed), []
        while sum(sizes) < total:
            sizes.append(min(rng.choice([1, 2, 3, 5, 7, 8, 13, 25]), total - sum(sizes)))
        chunkings.append(sizes)
    decoder = StreamingDecoder(model, max_slots=3)
    for chunking in chunkings:
        decoder.reset([1])
        assert max_error(stream(decoder, codes, 1, chunking), reference) <= TOLERANCE, chunking


def test_batch_mates_padding_and_slot_ids_match_offline(model, requests):
    """Random subsets of requests share steps in random row order, padded to the longest chunk."""
    rng = random.Random(5)
    slot_of = {"a": 4, "b": 0, "c": 6, "d": 2}
    decoder = StreamingDecoder(model, max_slots=7)
    done = {name: 0 for name in FRAMES}
    streamed = {name: [] for name in FRAMES}
    while any(done[n] < FRAMES[n] for n in FRAMES):
        active = [n for n in FRAMES if done[n] < FRAMES[n]]
        batch = rng.sample(active, rng.randint(1, len(active)))
        sizes = [min(rng.choice([1, 2, 3, 7, 25]), FRAMES[n] - done[n]) for n in batch]
        width = max(sizes) + rng.choice([0, 0, 3])  # sometimes every row is padded
        chunk = torch.randint(-5, 3000, (len(batch), 16, width))  # padding may hold any value
        for row, (name, size) in enumerate(zip(batch, sizes)):
            chunk[row, :, :size] = requests[name][0][:, done[name] : done[name] + size]
        pcm = decoder.step(chunk, torch.tensor([slot_of[n] for n in batch]), torch.tensor(sizes))
        assert pcm.shape == (len(batch), width * SPF)
        for row, (name, size) in enumerate(zip(batch, sizes)):
            assert torch.all(pcm[row, size * SPF :] == 0), "samples beyond lengths must be zero"
            streamed[name].append(pcm[row, : size * SPF])
            done[name] += size
    for name in FRAMES:
        assert max_error(torch.cat(streamed[name]), requests[name][1]) <= TOLERANCE, name


def test_slots_are_isolated_and_reusable_after_reset(model, requests):
    (b, ref_b), (c, ref_c), (d, ref_d) = requests["b"], requests["c"], requests["d"]
    decoder = StreamingDecoder(model, max_slots=2)
    # Slot 0 runs b while slot 1 runs d, interleaved.
    out_b = [decoder.step(b[None, :, :9], [0])[0]]
    out_d = [decoder.step(d[None, :, :15], [1])[0]]
    out_b.append(decoder.step(b[None, :, 9:], [0])[0])
    # Slot 0 is reused for a new request c: without the reset it would continue b.
    decoder.reset([0])
    out_c = [decoder.step(c[None, :, :5], [0])[0]]
    out_d.append(decoder.step(d[None, :, 15:], [1])[0])
    out_c.append(decoder.step(c[None, :, 5:], [0])[0])
    for pieces, reference in ((out_b, ref_b), (out_c, ref_c), (out_d, ref_d)):
        assert max_error(torch.cat(pieces), reference) <= TOLERANCE
    # Same frames again without a reset: the carried-over state changes them, so leaks would show.
    continued = decoder.step(c[None, :, :5], [0])[0]
    assert max_error(continued, out_c[0]) > 1e-3


def test_priming_with_context_frames(model, requests):
    """Prime K frames (decoded, not emitted), stream the rest == offline(all)[K*1920:]."""
    codes, reference = requests["a"]
    decoder = StreamingDecoder(model, max_slots=2)
    assert decoder.step(codes[None, :, :12], [1], emit=False) is None
    decoder.prime(codes[None, :, 12:30], [1])
    generated = stream(decoder, codes[:, 30:], 1, [10] * 12)
    assert max_error(generated, reference[30 * SPF :]) <= TOLERANCE
    # Without priming the same frames decode differently: the context really is used.
    decoder.reset([1])
    unprimed = decoder.step(codes[None, :, 30:40], [1])[0]
    assert max_error(unprimed, reference[30 * SPF : 40 * SPF]) > 1e-3


def test_positions_advance_by_valid_frames_only(model):
    decoder = StreamingDecoder(model, max_slots=3)
    codes = random_codes(2, 6, seed=9)
    decoder.step(codes, torch.tensor([2, 0]), torch.tensor([6, 3]))
    assert decoder.positions[:3].tolist() == [3, 0, 6]
    decoder.reset([2])
    assert decoder.positions[:3].tolist() == [3, 0, 0]
    assert all(torch.count_nonzero(pool[2]) == 0 for pool in decoder.pools.values())
    assert any(torch.count_nonzero(pool[0]) > 0 for pool in decoder.pools.values())
