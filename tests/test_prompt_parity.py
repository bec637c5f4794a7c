"""Prompt embeddings equal the official ones for every model type, voice mode and text mode.

Our layout + embedding (talker_service.prompt) runs on the official model's own lookups here, so
any difference is a layout/order error; test_generate_parity repeats the comparison with our
TalkerModel loaded from the saved checkpoint.
"""
from __future__ import annotations

import pytest
import torch

from checkpoint.configs import model_config
from talker_service.prompt import PromptRequest, PromptVocab, build_prefill, new_text_feed
from test_prompt_oracle import (OfficialEmbedder, capture_official_prompt, clone_prompt, official_model,
                                random_text_ids, wrap_instruct, wrap_ref, wrap_target)
from test_prompt_oracle import one_torch_thread  # noqa: F401  (autouse: one intra-op thread)

pytestmark = pytest.mark.oracle
TOL = 1e-5


def ours(model, model_type, text_ids, request: PromptRequest):
    """(prefill [L, H], trailing [T, H]) from our builder, trailing run until the first pad."""
    vocab = PromptVocab.from_config(model_config(model_type, "tiny"))
    embedder = OfficialEmbedder(model)
    feed = new_text_feed(vocab, request)
    feed.push(text_ids)
    feed.close()
    with torch.no_grad():
        prefill = build_prefill(vocab, request, feed, embedder, hidden_size=model.config.talker_config.hidden_size,
                                device=torch.device("cpu"), dtype=torch.float32)
        steps = []
        while (token := feed.take_step()) != vocab.tts_pad_id:
            steps.append(token)
        steps.append(token)  # one pad, which is what the official track reads past its end
        trailing = embedder.embed_text(torch.tensor(steps))
    return prefill, trailing


def max_diff(a, b) -> float:
    return float((a - b).abs().max()) if a.numel() else 0.0


def assert_row_equal(official, b, prefill, trailing):
    assert prefill.shape == official.prefill[b].shape, (prefill.shape, official.prefill[b].shape)
    assert max_diff(prefill, official.prefill[b]) <= TOL
    official_track = official.trailing[b]
    n = min(len(trailing), official_track.shape[0])
    assert max_diff(trailing[:n], official_track[:n]) <= TOL
    # past the official track's end everything is PAD_T, and ours is too
    assert max_diff(trailing[n:], official.tts_pad_embed) <= TOL
    assert max_diff(official_track[n:], official.tts_pad_embed) <= TOL


CUSTOM_CASES = [  # (speaker, language, has instruct): dialect speakers, nothink auto, think language
    ("vivian", "english", False), ("eric", "chinese", False), ("dylan", "auto", True),
    ("ryan", "auto", False), ("Uncle_Fu", "Chinese", True), ("eric", "english", False),
]


@pytest.mark.parametrize("non_streaming_mode", [True, False])
def test_custom_voice_prompts_match_official_batched(non_streaming_mode):
    model = official_model("custom_voice")
    g = torch.Generator().manual_seed(2)
    texts = [random_text_ids(g, n) for n in (5, 1, 9, 3, 2, 7)]
    instructs = [random_text_ids(g, 4) if has else None for _, _, has in CUSTOM_CASES]
    official = capture_official_prompt(
        model, input_ids=[wrap_target(t) for t in texts],
        instruct_ids=[wrap_instruct(i) if i else None for i in instructs],
        languages=[c[1] for c in CUSTOM_CASES], speakers=[c[0] for c in CUSTOM_CASES],
        non_streaming_mode=non_streaming_mode)
    for b, (speaker, language, _) in enumerate(CUSTOM_CASES):
        request = PromptRequest(language=language, speaker=speaker, non_streaming_mode=non_streaming_mode,
                                instruct_ids=wrap_instruct(instructs[b])[0].tolist() if instructs[b] else None)
        assert_row_equal(official, b, *ours(model, "custom_voice", texts[b], request))


@pytest.mark.parametrize("non_streaming_mode", [True, False])
def test_voice_design_prompts_match_official(non_streaming_mode):
    model = official_model("voice_design")
    g = torch.Generator().manual_seed(3)
    texts = [random_text_ids(g, n) for n in (6, 2)]
    instructs = [random_text_ids(g, 8), None]
    languages = ["french", "auto"]
    official = capture_official_prompt(
        model, input_ids=[wrap_target(t) for t in texts],
        instruct_ids=[wrap_instruct(i) if i else None for i in instructs], languages=languages,
        non_streaming_mode=non_streaming_mode)
    for b in range(2):
        request = PromptRequest(language=languages[b], non_streaming_mode=non_streaming_mode,
                                instruct_ids=wrap_instruct(instructs[b])[0].tolist() if instructs[b] else None)
        assert_row_equal(official, b, *ours(model, "voice_design", texts[b], request))


# (text tokens, reference text tokens, reference frames): text overflowing the codec track into
# the trailing track, text exactly filling it, text shorter than it (PAD_T-filled), x-vector only.
BASE_CASES = [(9, 3, 6), (4, 2, 6), (2, 2, 8), (5, 0, 0)]


@pytest.mark.parametrize("non_streaming_mode", [True, False])
def test_base_clone_prompts_match_official(non_streaming_mode):
    model = official_model("base")
    hidden = model.config.talker_config.hidden_size
    g = torch.Generator().manual_seed(4)
    texts, clones, ref_wrapped = [], [], []
    for n_text, n_ref, n_frames in BASE_CASES:
        texts.append(random_text_ids(g, n_text))
        x_vector = torch.randn(hidden, generator=g)
        if n_frames:
            codes = torch.randint(0, 2048, (n_frames, 16), generator=g)
            ref_ids = random_text_ids(g, n_ref)
            clones.append(clone_prompt(x_vector, codes, ref_ids))
            ref_wrapped.append(wrap_ref(ref_ids))
        else:
            clones.append(clone_prompt(x_vector))
            ref_wrapped.append(None)
    official = capture_official_prompt(
        model, input_ids=[wrap_target(t) for t in texts], ref_ids=ref_wrapped,
        voice_clone_prompt=dict(ref_code=[c.ref_codes for c in clones],
                                ref_spk_embedding=[c.x_vector for c in clones],
                                x_vector_only_mode=[c.ref_codes is None for c in clones],
                                icl_mode=[c.ref_codes is not None for c in clones]),
        languages=["english", "auto", "german", "chinese"], non_streaming_mode=non_streaming_mode)
    for b, language in enumerate(["english", "auto", "german", "chinese"]):
        request = PromptRequest(language=language, clone=clones[b], non_streaming_mode=non_streaming_mode)
        assert_row_equal(official, b, *ours(model, "base", texts[b], request))
