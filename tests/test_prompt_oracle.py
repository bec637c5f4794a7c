"""Oracle helpers shared by the prompt and generate tests, plus checks of the helpers themselves.

`capture_official_prompt` runs the official `Qwen3TTSForConditionalGeneration.generate` up to the
point where it hands the prompt to `talker.generate`, and returns what it passed (prefill
embeddings, attention mask, trailing text track), so our prompt builder can be compared with the
official one position by position.
"""
from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

import test_talker_model_support as talker_support
from checkpoint.configs import model_config

IM_END, NEWLINE = 151645, 198
ROLE = [151644, 77091, NEWLINE]
TARGET_SUFFIX = [IM_END, NEWLINE, 151644, 77091, NEWLINE]


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """Tiny models: intra-op threads only add overhead. Measured on the 2-core CI box: this
    part's tests take 37 s with one thread and 200 s with torch's default two. Import it into a
    test module to apply it there; the previous setting comes back after the module."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def official_model(model_type: str, seed: int = 0, config: dict | None = None):
    """The official model of `model_type` with O(1) random weights (test_talker_model_support)."""
    return talker_support.official_model(config or model_config(model_type, "tiny"), seed)


def clone_prompt(x_vector, ref_codes=None, ref_text_ids=None):
    from talker_service.voice.clone_prompt import VoiceClonePrompt
    return VoiceClonePrompt(x_vector=x_vector, ref_codes=ref_codes, ref_text_ids=ref_text_ids)


def random_text_ids(generator: torch.Generator, n: int) -> list[int]:
    return torch.randint(1000, 150000, (n,), generator=generator).tolist()


def wrap_target(text_ids: list[int]) -> torch.Tensor:
    return torch.tensor([ROLE + text_ids + TARGET_SUFFIX])


def wrap_ref(ref_ids: list[int]) -> torch.Tensor:
    return torch.tensor([ROLE + ref_ids + [IM_END, NEWLINE]])


def wrap_instruct(instruct_ids: list[int]) -> torch.Tensor:
    return torch.tensor([[151644, 872, NEWLINE] + instruct_ids + [IM_END, NEWLINE]])


@dataclass
class OfficialPrompt:
    prefill: list[torch.Tensor]     # per row [L_i, H], left padding removed
    trailing: torch.Tensor          # [B, T, H], rows right-padded with PAD_T
    tts_pad_embed: torch.Tensor     # [H]
    attention_mask: torch.Tensor    # [B, Lmax]


class _Captured(Exception):
    pass


def capture_official_prompt(model, **generate_kwargs) -> OfficialPrompt:
    seen: dict = {}

    def fake_talker_generate(**kwargs):
        seen.update(kwargs)
        raise _Captured

    model.talker.generate = fake_talker_generate
    try:
        with pytest.raises(_Captured):
            model.generate(**generate_kwargs)
    finally:
        del model.talker.generate
    embeds, mask = seen["inputs_embeds"], seen["attention_mask"]
    rows = [embeds[b][mask[b].bool()] for b in range(embeds.shape[0])]
    return OfficialPrompt(rows, seen["trailing_text_hidden"], seen["tts_pad_embed"].reshape(-1), mask)


class OfficialEmbedder:
    """The embedding lookups of the official talker, in the Embedder protocol's shape."""

    def __init__(self, model):
        self.talker = model.talker

    def embed_text(self, ids):
        return self.talker.text_projection(self.talker.get_text_embeddings()(ids))

    def embed_codec(self, ids):
        return self.talker.get_input_embeddings()(ids)

    def embed_frame(self, codes):
        total = self.talker.get_input_embeddings()(codes[..., 0])
        for i in range(1, codes.shape[-1]):
            total = total + self.talker.code_predictor.get_input_embeddings()[i - 1](codes[..., i])
        return total


@pytest.mark.oracle
def test_capture_returns_the_documented_custom_voice_layout():
    """Facts §5.3: English + named speaker, no instruct: N+11 prefill positions non-streaming,
    10 in dual-track mode with trailing [t2..tN, EOS_T]."""
    model = official_model("custom_voice")
    text = random_text_ids(torch.Generator().manual_seed(1), 6)
    common = dict(input_ids=[wrap_target(text)], languages=["english"], speakers=["vivian"])
    non_streaming = capture_official_prompt(model, non_streaming_mode=True, **common)
    streaming = capture_official_prompt(model, non_streaming_mode=False, **common)
    assert non_streaming.prefill[0].shape[0] == len(text) + 11
    assert streaming.prefill[0].shape[0] == 10
    assert streaming.trailing.shape[1] == len(text)   # t2..t6 + EOS_T
