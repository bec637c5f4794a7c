"""Bad inputs raise ValueError naming the problem, and leave every slot's state untouched."""
from __future__ import annotations

import pytest
import torch

from test_decoder_fixtures import random_codes, single_thread, tiny_code2wav  # noqa: F401 (single_thread: autouse fixture)
from vocoder_service.codec import StreamingDecoder

SPF = 1920
MAX_SLOTS = 4


def _good(frames=3, bs=1):
    return random_codes(bs, frames, seed=40 + frames + bs)


def _with(codes, row, book, frame, value):
    codes = codes.clone()
    codes[row, book, frame] = value
    return codes


# (id, codes, slots, lengths, message regex)
BAD_STEPS = [
    ("codebooks", random_codes(1, 3, seed=1)[:, :15], [1], [3], r"wrong number of codebooks: expected 16, got 15"),
    ("too_large", _with(_good(), 0, 5, 1, 2048), [1], [3], r"code >= codebook size 2048: 2048 at batch row 0, codebook 5, frame 1"),
    ("negative", _with(_good(), 0, 0, 2, -1), [1], [3], r"negative code: -1 at batch row 0, codebook 0, frame 2"),
    ("float", _good().float(), [1], [3], r"codes must have an integer dtype, got torch.float32"),
    ("bool", _good() > 5, [1], [3], r"codes must have an integer dtype, got torch.bool"),
    ("empty", torch.zeros(1, 16, 0, dtype=torch.int64), [1], [1], r"empty chunk: codes has 0 frames"),
    ("rank", torch.zeros(16, 3, dtype=torch.int64), [1], [3], r"codes must have 3 dims"),
    ("slot_high", _good(), [MAX_SLOTS], [3], rf"slot out of range \[0, {MAX_SLOTS}\): \[{MAX_SLOTS}\]"),
    ("slot_negative", _good(), [-1], [3], r"slot out of range"),
    ("duplicate", _good(bs=2), [1, 1], [3, 3], r"duplicate slots in one batch: \[1\]"),
    ("length_zero", _good(bs=2), [0, 1], [0, 3], r"lengths must lie in \[1, 3\]"),
    ("length_long", _good(), [1], [4], r"lengths must lie in \[1, 3\]"),
    ("batch_mismatch", _good(bs=2), [1], [3, 3], r"batch size mismatch"),
    ("slots_float", _good(), torch.tensor([1.0]), [3], r"slots must have an integer dtype"),
]


@pytest.fixture(scope="module")
def model():
    return tiny_code2wav()


def _snapshot(decoder):
    return {k: v.clone() for k, v in decoder.pools.items()}, decoder.positions.clone()


def _assert_unchanged(decoder, snapshot):
    pools, positions = snapshot
    assert torch.equal(decoder.positions, positions)
    for key, value in pools.items():
        assert torch.equal(decoder.pools[key], value), key


@pytest.mark.parametrize("name,codes,slots,lengths,message", BAD_STEPS, ids=[c[0] for c in BAD_STEPS])
def test_bad_step_is_rejected_without_touching_state(model, name, codes, slots, lengths, message):
    decoder = StreamingDecoder(model, max_slots=MAX_SLOTS)
    decoder.step(random_codes(2, 2, seed=2), [0, 1])  # slots 0 and 1 mid-stream
    before = _snapshot(decoder)
    with pytest.raises(ValueError, match=message):
        decoder.step(codes, slots, torch.as_tensor(lengths))
    _assert_unchanged(decoder, before)


def test_padding_values_are_not_validated_but_valid_frames_are(model):
    decoder = StreamingDecoder(model, max_slots=2)
    codes = _with(_with(_good(), 0, 3, 2, -1), 0, 4, 2, 5000)  # garbage only in frame 2
    decoder.step(codes, [0], [2])  # frame 2 is padding: accepted
    with pytest.raises(ValueError, match="negative code: -1 at batch row 0, codebook 3, frame 2"):
        decoder.step(codes, [0], [3])


def test_other_slots_continue_exactly_after_rejected_calls(model):
    """Interleave every bad call with a live stream; its output still equals the offline decode."""
    codes = random_codes(1, 2 + len(BAD_STEPS), seed=77)
    reference = model.decode(codes)[0]
    decoder = StreamingDecoder(model, max_slots=MAX_SLOTS)
    pieces = [decoder.step(codes[:, :, :2], [1])[0]]
    for i, (name, bad_codes, slots, lengths, message) in enumerate(BAD_STEPS):
        with pytest.raises(ValueError, match=message):
            decoder.step(bad_codes, slots, torch.as_tensor(lengths))
        pieces.append(decoder.step(codes[:, :, 2 + i : 3 + i], [1])[0])
    assert (torch.cat(pieces) - reference).abs().max().item() <= 1e-4


@pytest.mark.parametrize(
    "codes,message",
    [
        (random_codes(1, 3, seed=1)[:, :8], "wrong number of codebooks: expected 16, got 8"),
        (_with(_good(), 0, 15, 0, 4096), "code >= codebook size 2048: 4096"),
        (_with(_good(), 0, 1, 1, -3), "negative code: -3"),
        (_good().to(torch.float64), "integer dtype"),
        (torch.zeros(2, 16, 0, dtype=torch.int32), "empty chunk"),
    ],
)
def test_offline_decode_rejects_bad_codes(model, codes, message):
    with pytest.raises(ValueError, match=message):
        model.decode(codes)


def test_reset_rejects_out_of_range_slots(model):
    decoder = StreamingDecoder(model, max_slots=2)
    decoder.step(_good(), [0])
    before = _snapshot(decoder)
    with pytest.raises(ValueError, match=r"slot out of range \[0, 2\): \[2\]"):
        decoder.reset([0, 2])
    _assert_unchanged(decoder, before)


def test_decoder_refuses_a_model_on_another_dtype(model):
    with pytest.raises(ValueError, match="load the model with that device and dtype"):
        StreamingDecoder(model, max_slots=1, dtype=torch.bfloat16)


def test_float_slots_and_lengths_lists_are_rejected_not_truncated(model):
    decoder = StreamingDecoder(model, max_slots=2)
    with pytest.raises(ValueError, match="slots must have an integer dtype"):
        decoder.step(_good(), [1.5], [3])
    with pytest.raises(ValueError, match="lengths must have an integer dtype"):
        decoder.step(_good(), [1], [2.0])
    with pytest.raises(ValueError, match="codes must be a torch.Tensor"):
        decoder.step([[1] * 16], [1])
