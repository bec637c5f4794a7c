"""Random initial values for a checkpoint's tensors, chosen by tensor name.

Goals: (1) a sane forward pass (activations O(1), finite, audio not stuck at the clamp);
(2) every parameter visibly matters, so parity tests catch a dropped or swapped op. That is
why norm weights are 1 + small noise rather than exactly 1, biases and SnakeBeta log-alpha /
log-beta are small noise rather than exactly 0 (the official init: a missing exp() or a swapped
alpha/beta would otherwise not change the output), and the ConvNeXt gamma is 0.1 rather than
the official 1e-6. Each tensor draws from its own generator seeded by (seed, name), so values
do not depend on which other tensors exist or on their order.
"""
from __future__ import annotations

import hashlib
import math
import re

import torch

EMBEDDING_STD = 1.0
NORM_NOISE_STD = 0.1
BIAS_STD = 0.02
SNAKE_LOG_PARAM_STD = 0.1
CONVNEXT_GAMMA = 0.1
# Weight gains of the last conv of each Code2Wav residual branch and of the waveform conv. With
# gain 1 each decoder block grew the signal std ~1.7x and 80% of the samples sat at the [-1, 1]
# clamp, which hides decoder errors from parity tests. Measured with these gains on random codes:
# output std 0.34 / 0.4% clamped (tiny codec), 0.40 / 1.3% clamped (full-size codec).
RESIDUAL_BRANCH_GAIN = 0.3
WAVEFORM_CONV_GAIN = 0.15

_EMBEDDING = re.compile(r"(codec_embedding(\.\d+)?|text_embedding)\.weight$")
# Code2Wav's ConvTranspose1d weights [in, out, k]: upsamplers (stride k) and decoder blocks (stride k/2).
_UPSAMPLE_TRANSPOSED = re.compile(r"(^|\.)upsample\.\d+\.0\.conv\.weight$")
_BLOCK_TRANSPOSED = re.compile(r"(^|\.)decoder\.\d+\.block\.1\.conv\.weight$")
_RESIDUAL_BRANCH_OUT = re.compile(r"\.block\.[234]\.conv2\.conv\.weight$")
_WAVEFORM_CONV = re.compile(r"(^|\.)decoder\.decoder\.\d+\.conv\.weight$")  # with 1 output channel


def generator_for(seed: int, name: str) -> torch.Generator:
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    # The CPU generator (mt19937) keeps only 32 bits of its seed, so hash (seed, name) into 32.
    digest = hashlib.sha256(f"{seed}\0{name}".encode("utf-8")).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:4], "little"))


def init_tensor(name: str, shape: tuple[int, ...], seed: int, layer_scale: float = 0.01) -> torch.Tensor:
    """A float32 tensor of `shape` for the checkpoint tensor `name`."""
    gen = generator_for(seed, name)

    def normal(std: float, mean: float = 0.0) -> torch.Tensor:
        return torch.randn(shape, generator=gen, dtype=torch.float32) * std + mean

    if name.endswith("cluster_usage") or name.endswith("codebook.initialized"):
        # usage > 0 keeps embedding_sum / usage finite; initialized = 1 stops Mimi re-initialising
        return torch.ones(shape)
    if name.endswith("embedding_sum") or name.endswith("embed_sum"):
        return normal(1.0)
    if name.endswith(".alpha") or name.endswith(".beta"):
        return normal(SNAKE_LOG_PARAM_STD)  # log space: exp() is ~1
    if name.endswith("layer_scale.scale"):
        return torch.full(shape, float(layer_scale))
    if name.endswith(".gamma"):
        return torch.full(shape, CONVNEXT_GAMMA)
    if name.endswith(".bias"):
        return normal(BIAS_STD)
    if len(shape) == 1:  # RMSNorm / LayerNorm weights
        return normal(NORM_NOISE_STD, mean=1.0)
    if _EMBEDDING.search(name):
        return normal(EMBEDDING_STD)
    gain = 1.0
    if _RESIDUAL_BRANCH_OUT.search(name):
        gain = RESIDUAL_BRANCH_GAIN
    elif _WAVEFORM_CONV.search(name) and shape[0] == 1:
        gain = WAVEFORM_CONV_GAIN
    return normal(gain / math.sqrt(_fan_in(name, shape)))


def _fan_in(name: str, shape: tuple[int, ...]) -> int:
    """Inputs summed into one output value (keeps each layer's output variance ~ its input's)."""
    if _UPSAMPLE_TRANSPOSED.search(name):  # stride == kernel: each output sees one input step
        return shape[0]
    if _BLOCK_TRANSPOSED.search(name):  # kernel == 2 * stride: each output sees two input steps
        return shape[0] * 2
    fan_in = shape[1]  # Linear [out, in]; Conv1d [out, in / groups, k]
    for size in shape[2:]:
        fan_in *= size
    return fan_in
