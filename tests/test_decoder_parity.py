"""Code2Wav vs the official decoder: weights saved by the official classes, loaded by ours."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from test_decoder_fixtures import load_tiny_code2wav, official_tiny_tokenizer, random_codes, single_thread  # noqa: F401 (single_thread: autouse fixture)

pytestmark = pytest.mark.oracle

NUM_FRAMES = 150  # > twice the 72-frame attention window


@pytest.fixture(scope="module")
def models():
    official, _ = official_tiny_tokenizer()
    return official.decoder, load_tiny_code2wav()


@pytest.fixture(scope="module")
def codes_and_reference(models):
    official, _ = models
    codes = random_codes(2, NUM_FRAMES, seed=7)
    with torch.no_grad():
        reference = official(codes)[:, 0]  # the unchunked forward, not the 300/25 chunked decode
    return codes, reference


@pytest.fixture(params=["channel-major", "time-major"])
def layout(models, request):
    """Runs a test with our decoder's conv stack in each activation layout (codec/layout.py)."""
    _, ours = models
    original = ours.time_major
    ours.time_major = request.param == "time-major"
    yield request.param
    ours.time_major = original


def test_decode_matches_official_unchunked_forward(models, codes_and_reference, layout):
    _, ours = models
    codes, reference = codes_and_reference
    pcm = ours.decode(codes)
    assert pcm.shape == (2, NUM_FRAMES * 1920) and pcm.dtype == torch.float32
    assert (pcm - reference).abs().max().item() <= 1e-4
    # The comparison means something only if the signal is non-trivial and mostly unclamped.
    assert reference.std().item() > 0.1
    assert (reference.abs() >= 1).float().mean().item() < 0.2
    assert (pcm[0] - pcm[1]).abs().max().item() > 0.1  # rows differ: no batch mixing hides


@pytest.mark.parametrize("window", [71, 73])
def test_parity_resolves_the_window_size(models, codes_and_reference, window):
    """A wrong window (off by one either way) must fail the parity bound above."""
    _, ours = models
    codes, reference = codes_and_reference
    original = ours.pre_transformer.config
    ours.pre_transformer.config = dataclasses.replace(original, sliding_window=window)
    try:
        pcm = ours.decode(codes)
    finally:
        ours.pre_transformer.config = original
    first_affected = min(window, original.sliding_window)  # frames before it see < 71 keys either way
    assert (pcm[:, : first_affected * 1920] - reference[:, : first_affected * 1920]).abs().max() <= 1e-4
    assert (pcm - reference).abs().max().item() > 1e-3


def test_decode_has_no_lookahead(models):
    """Changing frame f changes nothing before sample f*1920 and something right after it."""
    _, ours = models
    codes = random_codes(1, 30, seed=3)
    changed = codes.clone()
    changed[:, :, 17] = (changed[:, :, 17] + 1) % 2048
    a, b = ours.decode(codes), ours.decode(changed)
    boundary = 17 * 1920
    assert torch.equal(a[:, :boundary], b[:, :boundary])
    assert (a[:, boundary : boundary + 1920] - b[:, boundary : boundary + 1920]).abs().max() > 1e-3


def test_snake_goes_through_the_kernel_dispatcher_with_precomputed_params(models, monkeypatch):
    """Every SnakeBeta calls the kernel dispatcher with exp(alpha), 1/(exp(beta)+1e-9), and in the
    conv decoder each one also adds its producer conv's bias (and the residual) in the same pass."""
    from kernels import snakebeta

    official, ours = models
    calls = []
    real_plain, real_fused = snakebeta.snake_beta, snakebeta.snake_beta_fused

    def counting_plain(x, alpha_exp, inv_beta):
        calls.append(("plain", alpha_exp, inv_beta, None, None, False))
        return real_plain(x, alpha_exp, inv_beta)

    def counting_fused(x, alpha_exp, inv_beta, bias=None, residual=None, return_sum=False):
        calls.append(("fused", alpha_exp, inv_beta, bias, residual, return_sum))
        return real_fused(x, alpha_exp, inv_beta, bias=bias, residual=residual, return_sum=return_sum)

    monkeypatch.setattr(snakebeta, "snake_beta", counting_plain)
    monkeypatch.setattr(snakebeta, "snake_beta_fused", counting_fused)
    ours.decode(random_codes(1, 2, seed=1))
    num_snakes = sum(1 for n, _ in official.named_modules() if type(_).__name__ == "SnakeBeta")
    assert len(calls) == num_snakes == 4 * 7 + 1
    assert all(kind == "fused" and bias is not None for kind, _, _, bias, _, _ in calls)
    # 3 residual units per block: each one's output goes to the next Snake with its residual.
    assert sum(residual is not None for *_, residual, _ in calls) == 4 * 3
    # The residual stream is stored where a unit starts (its input is also what it adds back).
    assert sum(return_sum for *_, return_sum in calls) == 4 * 3
    final = dict(official.named_parameters())
    alpha, beta = final["decoder.5.alpha"].detach(), final["decoder.5.beta"].detach()
    _, alpha_exp, inv_beta, bias, _, _ = calls[-1]
    assert alpha_exp.dtype == torch.float32 and inv_beta.dtype == torch.float32
    torch.testing.assert_close(alpha_exp, torch.exp(alpha), rtol=1e-6, atol=0)
    torch.testing.assert_close(inv_beta, 1.0 / (torch.exp(beta) + 1e-9), rtol=1e-6, atol=0)
    assert torch.equal(bias, final["decoder.4.block.4.conv2.conv.bias"].detach())


def test_bf16_load_keeps_derived_tables_fp32_and_tracks_fp32():
    ours16 = load_tiny_code2wav(dtype=torch.bfloat16)
    ours32 = load_tiny_code2wav()
    assert ours16.pre_conv.conv.weight.dtype == torch.bfloat16
    snake16, snake32 = ours16.decoder[5], ours32.decoder[5]
    assert snake16.alpha_exp.dtype == torch.float32
    assert torch.equal(snake16.alpha_exp, snake32.alpha_exp)  # derived before the cast
    assert ours16.quantizer.tables.dtype == torch.float32
    assert ours16.pre_transformer.inv_freq.dtype == torch.float32
    codes = random_codes(1, 12, seed=5)
    pcm16, pcm32 = ours16.decode(codes), ours32.decode(codes)
    assert pcm16.dtype == torch.bfloat16
    # bf16 through ~40 layers: loose but far below the signal scale (std ~0.5).
    assert (pcm16.float() - pcm32).abs().mean().item() < 0.05


def test_streaming_matches_official_unchunked_forward_beyond_300_frames(models, layout):
    """The official decode() windows at 300 frames with 25 of context; we equal the true forward."""
    from vocoder_service.codec import StreamingDecoder

    official, ours = models
    codes = random_codes(1, 330, seed=8)
    with torch.no_grad():
        unchunked = official(codes)[0, 0]
        windowed = official.chunked_decode(codes)[0, 0]
    decoder = StreamingDecoder(ours, max_slots=1)
    pieces = [decoder.step(codes[:, :, i : i + 25], [0])[0] for i in range(0, 330, 25)]
    assert (torch.cat(pieces) - unchunked).abs().max().item() <= 1e-4
    assert (windowed - unchunked)[300 * 1920 :].abs().max().item() > 1e-2  # why exactness matters
