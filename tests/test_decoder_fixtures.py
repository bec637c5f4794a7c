"""Shared helpers for the decoder tests: a tiny random checkpoint saved by the official classes.

Not a test module by itself (no tests); other test_decoder_* files import from it.
"""
from __future__ import annotations

import functools
import tempfile
from pathlib import Path

import pytest
import torch

from checkpoint.configs import speech_tokenizer_config

SEED = 1234


@pytest.fixture(scope="module", autouse=True)
def single_thread():
    """Run the tiny decoder on one intra-op thread, restored afterwards.

    Measured on the 2-core CI box while other suites ran: a 40-frame tiny decode took 0.09-0.18 s
    on one thread and 1.8-2.3 s on two (the many small per-sample ops oversubscribe the cores).
    Import this fixture into each decoder test module.
    """
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def randomize_decoder_(decoder: torch.nn.Module, seed: int = SEED) -> None:
    """Give every decoder weight a non-trivial random value.

    The official init leaves codebooks at zero, SnakeBeta at log 0, layer scale at 0.01 and
    ConvNeXt gamma at 1e-6: the transformer and the Snake terms would barely touch the output and
    a wrong window or a wrong Snake formula could pass. These scales keep every branch visible
    while most output samples stay inside the [-1, 1] clamp.
    """
    gen = torch.Generator().manual_seed(seed)

    def normal(shape, std, mean=0.0):
        return torch.randn(shape, generator=gen) * std + mean

    with torch.no_grad():
        for name, param in decoder.named_parameters():
            shape = param.shape
            if name.endswith("cluster_usage"):
                value = torch.rand(shape, generator=gen) * 1.5 + 0.5
                value[:3] = torch.tensor([0.0, 1e-7, 2e-5])  # exercise the 1e-5 clamp
            elif name.endswith("embedding_sum"):
                value = normal(shape, 1.0)
            elif name.endswith((".alpha", ".beta")):
                value = normal(shape, 0.4)
            elif name.endswith("layer_scale.scale") or name.endswith("gamma"):
                value = normal(shape, 0.2, mean=0.6)
            elif "norm" in name and name.endswith("weight"):
                value = normal(shape, 0.1, mean=1.0)
            elif name.endswith("bias"):
                value = normal(shape, 0.05)
            else:  # linear / conv / transposed-conv weights: unit-variance outputs
                fan_in = shape[1] * (shape[2] if len(shape) > 2 else 1)
                if "upsample" in name and name.endswith("0.conv.weight") or ".block.1.conv" in name:
                    fan_in = shape[0] * shape[2] // 2  # ConvTranspose: [in, out, k], stride k/2
                value = normal(shape, fan_in ** -0.5)
            param.copy_(value)
        for name, param in decoder.named_parameters():
            if name.endswith("embedding_sum"):
                # Rows whose usage is clamped: small sums keep their entries O(1) after the clamp
                # (a missing clamp would still blow them up by >= 100x).
                param[:3].mul_(1e-5)
        for name, param in decoder.named_parameters():
            if name.endswith("conv2.conv.weight"):
                param.mul_(0.3)  # residual units would otherwise double the variance per block
        decoder.decoder[-1].conv.weight.mul_(0.5)
        # SnakeBeta adds a non-negative term, so the output drifts positive: centre it on one
        # calibration batch so that most samples stay inside the [-1, 1] clamp.
        if hasattr(decoder, "prepare"):  # ours: derive SnakeBeta/codebook tables from the new weights
            decoder.prepare()
        captured = []
        handle = decoder.decoder[-1].register_forward_hook(lambda m, i, o: captured.append(o))
        decoder(torch.randint(0, 2048, (1, 16, 30), generator=gen))
        handle.remove()
        decoder.decoder[-1].conv.bias.sub_(captured[0].mean())
        if hasattr(decoder, "prepare"):
            decoder.prepare()


@functools.lru_cache(maxsize=None)
def official_tiny_tokenizer():
    """(official Qwen3TTSTokenizerV2Model with randomized decoder, the dir it was saved to)."""
    from oracle import import_oracle

    import_oracle()
    from qwen_tts.core.tokenizer_12hz.configuration_qwen3_tts_tokenizer_v2 import Qwen3TTSTokenizerV2Config
    from qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 import Qwen3TTSTokenizerV2Model

    torch.manual_seed(SEED)
    model = Qwen3TTSTokenizerV2Model(Qwen3TTSTokenizerV2Config(**speech_tokenizer_config("tiny")))
    randomize_decoder_(model.decoder)
    model.eval()
    directory = Path(tempfile.mkdtemp(prefix="tiny_speech_tokenizer_"))
    model.save_pretrained(str(directory))
    return model, directory


@functools.lru_cache(maxsize=None)
def tiny_decoder_dir() -> Path:
    return official_tiny_tokenizer()[1]


def load_tiny_code2wav(dtype: torch.dtype = torch.float32):
    from vocoder_service.codec import Code2Wav

    return Code2Wav.from_pretrained(tiny_decoder_dir(), device="cpu", dtype=dtype)


@functools.lru_cache(maxsize=None)
def _tiny_code2wav_cached():
    from vocoder_service.codec import Code2Wav, DecoderConfig

    model = Code2Wav(DecoderConfig.from_dict(speech_tokenizer_config("tiny")["decoder_config"]))
    randomize_decoder_(model)
    return model.requires_grad_(False).eval()


def tiny_code2wav():
    """Our Code2Wav with random tiny weights, built without the oracle (fast; not for parity)."""
    return _tiny_code2wav_cached()


def random_codes(batch: int, frames: int, seed: int, codebook_size: int = 2048) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, codebook_size, (batch, 16, frames), generator=gen)
