"""TextFeed: tokens arriving while generating give exactly the inputs of all-at-once text."""
from __future__ import annotations

import random

import pytest

from talker_service.prompt import ALL_TEXT, TextFeed

EOS, PAD = 151673, 151671


def run_all_at_once(text, num_prefill, ref=(), num_steps=40):
    feed = TextFeed(EOS, PAD, num_prefill, ref_ids=ref)
    feed.push(text)
    feed.close()
    prefill = feed.take_prefill()
    return prefill, [feed.take_step() for _ in range(num_steps)]


def run_trickled(text, num_prefill, ref=(), num_steps=40, seed=0):
    """Tokens arrive in random bursts (sometimes none) between scheduler ticks; a tick that
    finds the feed not ready parks the request (records nothing) instead of padding."""
    rng = random.Random(seed)
    feed = TextFeed(EOS, PAD, num_prefill, ref_ids=ref)
    pending, prefill, steps, parked, tick = list(text), None, [], 0, 0
    while len(steps) < num_steps:
        burst = rng.choice([0, 0, 1, 2]) if tick else 0   # nothing has arrived at the first tick
        tick += 1
        if pending and burst:
            feed.push(pending[:burst])
            del pending[:burst]
        elif not pending and not feed.is_closed and rng.random() < 0.5:
            feed.close()
        if prefill is None:
            if feed.is_prefill_ready:
                prefill = feed.take_prefill()
            else:
                parked += 1
            continue
        token = feed.take_step()
        if token is None:
            parked += 1
            assert not feed.is_closed
        else:
            steps.append(token)
    return prefill, steps, parked


CASES = [  # (num text tokens, num_prefill_positions, num reference ids)
    (1, 1, 0), (7, 1, 0), (7, ALL_TEXT, 0), (1, ALL_TEXT, 0),
    (9, 6, 3), (3, 6, 3), (2, 6, 3), (4, 4, 5), (12, 8, 2),
]


@pytest.mark.parametrize("n_text,num_prefill,n_ref", CASES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_token_by_token_equals_all_at_once(n_text, num_prefill, n_ref, seed):
    text = list(range(1000, 1000 + n_text))
    ref = list(range(500, 500 + n_ref))
    expected = run_all_at_once(text, num_prefill, ref)
    prefill, steps, parked = run_trickled(text, num_prefill, ref, seed=seed)
    assert (prefill, steps) == expected
    assert parked > 0   # the trickle really made the request wait at least once


def test_dual_track_sequence_is_t1_then_rest_eos_pad():
    prefill, steps = run_all_at_once([11, 12, 13], 1, num_steps=6)
    assert prefill == [11]
    assert steps == [12, 13, EOS, PAD, PAD, PAD]


def test_non_streaming_takes_all_text_and_eos():
    prefill, steps = run_all_at_once([11, 12, 13], ALL_TEXT, num_steps=3)
    assert prefill == [11, 12, 13, EOS]
    assert steps == [PAD, PAD, PAD]


def test_icl_dual_track_pads_short_text_and_trails_long_text():
    assert run_all_at_once([11], 5, ref=[1, 2], num_steps=2) == ([1, 2, 11, EOS, PAD], [PAD, PAD])
    assert run_all_at_once([11, 12, 13, 14], 4, ref=[1, 2], num_steps=4) == ([1, 2, 11, 12], [13, 14, EOS, PAD])


def test_not_ready_until_text_arrives():
    feed = TextFeed(EOS, PAD, ALL_TEXT)
    feed.push([5, 6])
    assert not feed.is_prefill_ready            # non-streaming needs end of input
    feed.close()
    assert feed.take_prefill() == [5, 6, EOS]

    feed = TextFeed(EOS, PAD, 1)
    assert not feed.is_prefill_ready
    feed.push([5])
    assert feed.take_prefill() == [5]
    assert feed.take_step() is None and feed.take_step() is None   # parked, nothing consumed
    feed.push([6])
    assert feed.take_step() == 6
    assert feed.take_step() is None
    feed.close()
    assert [feed.take_step() for _ in range(2)] == [EOS, PAD]


def test_icl_prefill_waits_for_enough_text_or_end():
    feed = TextFeed(EOS, PAD, 5, ref_ids=[1, 2])
    feed.push([11])
    assert not feed.is_prefill_ready       # needs text positions 3..4 or the end of input
    feed.push([12, 13])
    assert feed.is_prefill_ready and feed.take_prefill() == [1, 2, 11, 12, 13]


def test_errors():
    feed = TextFeed(EOS, PAD, 1, max_text_tokens=3)
    with pytest.raises(ValueError, match="empty"):
        feed.close()
    feed.push([1, 2])
    with pytest.raises(ValueError, match="limit of 3 tokens"):
        feed.push([3, 4])
    feed.push([3])
    feed.close()
    with pytest.raises(ValueError, match="after end of input"):
        feed.push([4])
    with pytest.raises(ValueError):
        TextFeed(EOS, PAD, 0)
    not_ready = TextFeed(EOS, PAD, ALL_TEXT)
    with pytest.raises(RuntimeError, match="not ready"):
        not_ready.take_prefill()
