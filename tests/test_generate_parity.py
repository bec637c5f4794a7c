"""Greedy generation through our Synthesizer equals the official generate, code for code.

Each model type and both text modes; several requests share our decode steps (and more
requests than slots, so rows join as others finish) while the official model runs each
request alone. Prompts are also compared with our TalkerModel doing the embedding lookups.
"""
from __future__ import annotations

import pytest
import torch

from checkpoint.configs import model_config
from talker_service.generate import SynthesisRequest, Synthesizer
from talker_service.model import SamplingParams
from talker_service.prompt import PromptRequest, build_prefill, new_text_feed
from test_prompt_oracle import (capture_official_prompt, clone_prompt, official_model, random_text_ids,
                                wrap_instruct, wrap_ref, wrap_target)
from test_talker_model_support import max_diff, save_official
from test_prompt_oracle import one_torch_thread  # noqa: F401  (autouse: one intra-op thread)

pytestmark = pytest.mark.oracle
EOS = 2150


def greedy(max_new_tokens: int) -> SamplingParams:
    return SamplingParams(do_sample=False, subtalker_dosample=False, max_new_tokens=max_new_tokens, seed=0)


def make_pair(tmp_path_factory, model_type: str, eos_scale: float = 1.0, max_slots: int = 4):
    official = official_model(model_type, seed=0)
    with torch.no_grad():  # >1 makes EOS win at varied steps, so rows end at different lengths
        official.talker.codec_head.weight[EOS] *= eos_scale
    config = model_config(model_type, "tiny")
    directory = save_official(official, config, tmp_path_factory.mktemp(model_type))
    return official, Synthesizer.from_pretrained(directory, max_slots=max_slots, max_seq_len=160)


def official_codes(official, **kwargs) -> torch.Tensor:
    codes, _ = official.generate(do_sample=False, subtalker_dosample=False, **kwargs)
    return codes[0]


def assert_same_codes(expected: list[torch.Tensor], got: list[torch.Tensor]) -> None:
    for i, (a, b) in enumerate(zip(expected, got)):
        assert a.shape == b.shape, f"request {i}: official {tuple(a.shape)} vs ours {tuple(b.shape)}"
        assert torch.equal(a, b), f"request {i}: first differing frame {int((a != b).any(1).nonzero()[0])}"


@pytest.fixture(scope="module")
def custom_voice(tmp_path_factory):
    return make_pair(tmp_path_factory, "custom_voice", max_slots=2)


@pytest.fixture(scope="module")
def voice_design(tmp_path_factory):
    return make_pair(tmp_path_factory, "voice_design", eos_scale=2.0, max_slots=4)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return make_pair(tmp_path_factory, "base")


@pytest.mark.parametrize("non_streaming_mode", [True, False])
def test_custom_voice_greedy_codes_match_official(custom_voice, non_streaming_mode):
    official, synth = custom_voice
    g = torch.Generator().manual_seed(10)
    cases = [("vivian", "english", None), ("eric", "chinese", random_text_ids(g, 5)), ("dylan", "auto", None)]
    texts = [random_text_ids(g, n) for n in (6, 1, 4)]
    expected = [official_codes(official, input_ids=[wrap_target(t)], languages=[lang], speakers=[spk],
                               instruct_ids=[wrap_instruct(ins) if ins else None], max_new_tokens=12,
                               non_streaming_mode=non_streaming_mode)
                for t, (spk, lang, ins) in zip(texts, cases)]
    got = synth.generate_codes([
        SynthesisRequest(text_ids=t, voice=spk, language=lang, sampling=greedy(12),
                         non_streaming_mode=non_streaming_mode, instruct_ids=wrap_instruct(ins)[0].tolist() if ins else None)
        for t, (spk, lang, ins) in zip(texts, cases)])   # 3 requests through 2 slots
    assert_same_codes(expected, got)


@pytest.mark.parametrize("non_streaming_mode", [True, False])
def test_voice_design_rows_end_at_eos_independently(voice_design, non_streaming_mode):
    official, synth = voice_design
    g = torch.Generator().manual_seed(5)
    texts = [random_text_ids(g, n) for n in (5, 1, 9, 3, 7, 2)]
    instructs = [random_text_ids(g, 6) if i % 2 else None for i in range(len(texts))]
    expected = [official_codes(official, input_ids=[wrap_target(t)], languages=["auto"], max_new_tokens=30,
                               instruct_ids=[wrap_instruct(ins) if ins else None],
                               non_streaming_mode=non_streaming_mode)
                for t, ins in zip(texts, instructs)]
    got = synth.generate_codes([
        SynthesisRequest(text_ids=t, language="auto", sampling=greedy(30), non_streaming_mode=non_streaming_mode,
                         instruct_ids=wrap_instruct(ins)[0].tolist() if ins else None)
        for t, ins in zip(texts, instructs)])
    assert_same_codes(expected, got)
    lengths = {c.shape[0] for c in got}
    assert len(lengths) >= 3 and min(lengths) >= 2   # EOS at different steps, never before min_new_tokens


def base_cases(hidden: int):
    g = torch.Generator().manual_seed(20)
    clones = [clone_prompt(torch.randn(hidden, generator=g), torch.randint(0, 2048, (6, 16), generator=g),
                     random_text_ids(g, 3)),
              clone_prompt(torch.randn(hidden, generator=g), torch.randint(0, 2048, (9, 16), generator=g),
                     random_text_ids(g, 2)),
              clone_prompt(torch.randn(hidden, generator=g))]
    texts = [random_text_ids(g, n) for n in (8, 3, 5)]
    return clones, texts


@pytest.mark.parametrize("non_streaming_mode", [True, False])
def test_base_clone_greedy_codes_match_official(base, non_streaming_mode):
    official, synth = base
    clones, texts = base_cases(synth.talker.config.hidden_size)
    expected = []
    for clone, text in zip(clones, texts):
        icl = clone.ref_codes is not None
        expected.append(official_codes(
            official, input_ids=[wrap_target(text)], languages=["english"], max_new_tokens=12,
            ref_ids=[wrap_ref(clone.ref_text_ids) if icl else None], non_streaming_mode=non_streaming_mode,
            voice_clone_prompt=dict(ref_code=[clone.ref_codes], ref_spk_embedding=[clone.x_vector],
                                    x_vector_only_mode=[not icl], icl_mode=[icl])))
    got = synth.generate_codes([SynthesisRequest(text_ids=t, voice=c, language="english", sampling=greedy(12),
                                                 non_streaming_mode=non_streaming_mode)
                                for c, t in zip(clones, texts)])
    assert_same_codes(expected, got)


@pytest.mark.parametrize("non_streaming_mode", [True, False])
def test_prompt_embeddings_with_our_talker_match_official(base, non_streaming_mode):
    """The same prompt comparison as test_prompt_parity, with our TalkerModel's lookups."""
    official, synth = base
    clones, texts = base_cases(synth.talker.config.hidden_size)
    for clone, text in zip(clones, texts):
        icl = clone.ref_codes is not None
        captured = capture_official_prompt(
            official, input_ids=[wrap_target(text)], languages=["german"], non_streaming_mode=non_streaming_mode,
            ref_ids=[wrap_ref(clone.ref_text_ids) if icl else None],
            voice_clone_prompt=dict(ref_code=[clone.ref_codes], ref_spk_embedding=[clone.x_vector],
                                    x_vector_only_mode=[not icl], icl_mode=[icl]))
        request = PromptRequest(language="german", clone=clone, non_streaming_mode=non_streaming_mode)
        feed = new_text_feed(synth.vocab, request)
        feed.push(text)
        feed.close()
        prefill = build_prefill(synth.vocab, request, feed, synth.talker, hidden_size=synth.talker.config.hidden_size,
                                device=torch.device("cpu"), dtype=torch.float32)
        assert prefill.shape == captured.prefill[0].shape
        assert max_diff(prefill, captured.prefill[0]) <= 1e-5
        track = captured.trailing[0]
        with torch.no_grad():
            ours = synth.talker.embed_text(torch.tensor([feed.take_step() for _ in range(track.shape[0])]))
        assert max_diff(ours, track) <= 1e-5
