"""embed_plan finds its positions on the host; the result must equal, bit for bit, the mask form it
replaced (kept below as the reference), for every model type and voice mode, and it must raise the
same ValueErrors. The embedder is a small random one with the model's shape of lookups (a text
table through a linear projection, a codec table, a frame = sum of per-codebook tables)."""
from __future__ import annotations

import pytest
import torch

from checkpoint.configs import model_config
from talker_service.prompt import PromptVocab, embed_plan, embed_prepared, plan_prompt
from talker_service.prompt.embed import prepare_plan
from talker_service.prompt.embed import plan_groups
from talker_service.prompt.layout import NO_CODEC, NO_TEXT, SPEAKER, PromptPlan

HIDDEN = 48
NUM_CODEBOOKS = 16


class RandomEmbedder:
    def __init__(self, text_vocab: int, codec_vocab: int, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.text_table = torch.randn(text_vocab, 32, generator=g)
        self.text_projection = torch.randn(32, HIDDEN, generator=g) / 8
        self.codec_table = torch.randn(codec_vocab, HIDDEN, generator=g)
        self.residual_tables = torch.randn(NUM_CODEBOOKS - 1, codec_vocab, HIDDEN, generator=g)

    def embed_text(self, ids: torch.Tensor) -> torch.Tensor:
        return self.text_table[ids] @ self.text_projection

    def embed_codec(self, ids: torch.Tensor) -> torch.Tensor:
        return self.codec_table[ids]

    def embed_frame(self, codes: torch.Tensor) -> torch.Tensor:
        rest = sum(self.residual_tables[i][codes[..., i + 1]] for i in range(NUM_CODEBOOKS - 1))
        return self.codec_table[codes[..., 0]] + rest


@torch.no_grad()
def reference_embed_plan(plan, embedder, *, device, dtype, hidden_size, speaker_vector=None, ref_codes=None):
    """The mask form embed_plan had before positions were found on the host (device masks,
    `.any()` and mask indexing: a device read-back each)."""
    text = torch.tensor(plan.text_ids, dtype=torch.long, device=device)
    codec = torch.tensor(plan.codec_ids, dtype=torch.long, device=device)
    frames = torch.tensor(plan.ref_frames, dtype=torch.long, device=device)
    out = torch.zeros(len(plan), hidden_size, dtype=dtype, device=device)
    has_text = text != NO_TEXT
    if has_text.any():
        out[has_text] += embedder.embed_text(text[has_text]).to(dtype)
    has_codec = codec >= 0
    if has_codec.any():
        out[has_codec] += embedder.embed_codec(codec[has_codec]).to(dtype)
    is_speaker = codec == SPEAKER
    if is_speaker.any():
        if speaker_vector is None:
            raise ValueError("the prompt has a speaker slot but no speaker vector was given")
        if speaker_vector.shape != (hidden_size,):
            raise ValueError(f"speaker vector must be [{hidden_size}], got {list(speaker_vector.shape)}")
        out[is_speaker] += speaker_vector.to(device=device, dtype=dtype)
    has_frame = frames >= 0
    if has_frame.any():
        if ref_codes is None:
            raise ValueError("the prompt has reference-frame positions but no reference codes were given")
        codes = ref_codes.to(device=device, dtype=torch.long)[frames[has_frame]]
        out[has_frame] += embedder.embed_frame(codes).to(dtype)
    unused = (codec == NO_CODEC) & ~has_text & ~has_frame
    if unused.any():
        raise ValueError("prompt plan has positions with neither text nor codec input")
    return out


def vocab_and_embedder(model_type: str) -> tuple[PromptVocab, RandomEmbedder]:
    config = model_config(model_type, "tiny")
    talker = config["talker_config"]
    assert talker["hidden_size"] == HIDDEN
    return PromptVocab.from_config(config), RandomEmbedder(talker["text_vocab_size"], talker["vocab_size"])


def random_ids(g: torch.Generator, n: int) -> list[int]:
    return torch.randint(1000, 150000, (n,), generator=g).tolist()


def prompt_cases():
    """(id, model type, plan_prompt kwargs, prefill text length, x-vector?, reference frames)."""
    for nsm in (True, False):
        mode = "non-streaming" if nsm else "dual-track"
        yield f"custom-voice-speaker-{mode}", "custom_voice", dict(speaker="vivian", language="english"), nsm, 0, False
        yield f"custom-voice-dialect-instruct-{mode}", "custom_voice", dict(
            speaker="dylan", language="auto", instruct_ids=list(range(1000, 1012))), nsm, 0, False
        yield f"voice-design-instruct-{mode}", "voice_design", dict(
            language="french", instruct_ids=list(range(2000, 2020))), nsm, 0, False
        yield f"base-xvector-{mode}", "base", dict(language="german"), nsm, 0, True
        yield f"base-icl-{mode}", "base", dict(language="auto"), nsm, 7, True


CASES = list(prompt_cases())


def build_case(model_type, kwargs, non_streaming_mode, num_frames, has_xvector, seed=1):
    vocab, embedder = vocab_and_embedder(model_type)
    g = torch.Generator().manual_seed(seed)
    if non_streaming_mode:
        text = random_ids(g, 9)
    else:
        text = random_ids(g, num_frames + 1 if num_frames else 1)
    plan = plan_prompt(vocab, text, non_streaming_mode=non_streaming_mode, has_speaker_vector=has_xvector,
                       num_ref_frames=num_frames, **kwargs)
    inputs = {}
    if has_xvector:
        inputs["speaker_vector"] = torch.randn(HIDDEN, generator=g)
    if num_frames:
        inputs["ref_codes"] = torch.randint(0, 2048, (num_frames, NUM_CODEBOOKS), generator=g)
    return plan, embedder, inputs


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_embed_plan_equals_the_mask_form_bit_for_bit(case, dtype):
    _, model_type, kwargs, nsm, num_frames, has_xvector = case
    plan, embedder, inputs = build_case(model_type, kwargs, nsm, num_frames, has_xvector)
    args = dict(device=torch.device("cpu"), dtype=dtype, hidden_size=HIDDEN, **inputs)
    ours = embed_plan(plan, embedder, **args)
    reference = reference_embed_plan(plan, embedder, **args)
    assert ours.dtype == reference.dtype and ours.shape == reference.shape == (len(plan), HIDDEN)
    assert torch.equal(ours.view(torch.int16 if dtype == torch.bfloat16 else torch.int32),
                       reference.view(torch.int16 if dtype == torch.bfloat16 else torch.int32))


def test_the_cases_cover_every_input_group():
    """Speaker rows, instructions, x-vector slots and reference frames all occur in some case."""
    seen = set()
    for _, model_type, kwargs, nsm, num_frames, has_xvector in CASES:
        plan, _, _ = build_case(model_type, kwargs, nsm, num_frames, has_xvector)
        groups = plan_groups(plan)
        seen |= {name for name in ("text_pos", "codec_pos", "speaker_pos", "frame_pos") if getattr(groups, name).size}
        if kwargs.get("instruct_ids"):
            seen.add("instruct")
    assert seen == {"text_pos", "codec_pos", "speaker_pos", "frame_pos", "instruct"}


def test_plan_groups_positions_and_ids():
    plan = PromptPlan()
    plan.add(text_id=5)
    plan.add(text_id=6, codec_id=SPEAKER)
    plan.add(codec_id=7)
    plan.add(text_id=8, ref_frame=1)
    plan.add(ref_frame=0)
    groups = plan_groups(plan)
    assert groups.text_pos.tolist() == [0, 1, 3] and groups.text_ids.tolist() == [5, 6, 8]
    assert groups.codec_pos.tolist() == [2] and groups.codec_ids.tolist() == [7]
    assert groups.speaker_pos.tolist() == [1]
    assert groups.frame_pos.tolist() == [3, 4] and groups.frame_ids.tolist() == [1, 0]
    assert groups.num_unused == 0


def small_plan(*positions: dict) -> PromptPlan:
    plan = PromptPlan()
    for position in positions:
        plan.add(**position)
    return plan


ERROR_CASES = {
    "speaker slot, no vector": (small_plan(dict(text_id=1), dict(codec_id=SPEAKER)), {},
                                "speaker slot but no speaker vector"),
    "speaker vector of the wrong size": (small_plan(dict(codec_id=SPEAKER)),
                                         {"speaker_vector": torch.zeros(HIDDEN + 1)}, "speaker vector must be"),
    "frames, no codes": (small_plan(dict(text_id=1, ref_frame=0)), {}, "no reference codes"),
    "a position with no input": (small_plan(dict(text_id=1), dict()), {}, "neither text nor codec"),
    # both problems: the speaker one is reported, as the mask form did
    "speaker and unused": (small_plan(dict(), dict(codec_id=SPEAKER)), {}, "speaker slot"),
    "frames and unused": (small_plan(dict(), dict(ref_frame=0)), {}, "no reference codes"),
}


@pytest.mark.parametrize("name", list(ERROR_CASES))
def test_errors_match_the_mask_form(name):
    plan, inputs, message = ERROR_CASES[name]
    _, embedder = vocab_and_embedder("base")
    args = dict(device=torch.device("cpu"), dtype=torch.float32, hidden_size=HIDDEN, **inputs)
    with pytest.raises(ValueError, match=message):
        reference_embed_plan(plan, embedder, **args)
    with pytest.raises(ValueError, match=message):
        embed_plan(plan, embedder, **args)


class NoLookups:
    """An embedder that fails if it is used: the input checks come before any device work."""

    def __getattr__(self, name):
        raise AssertionError(f"{name} called before the inputs were checked")


@pytest.mark.parametrize("name", list(ERROR_CASES))
def test_errors_come_before_any_lookup(name):
    plan, inputs, message = ERROR_CASES[name]
    with pytest.raises(ValueError, match=message):
        embed_plan(plan, NoLookups(), device=torch.device("cpu"), dtype=torch.float32, hidden_size=HIDDEN, **inputs)


def test_a_frame_past_the_reference_codes_is_a_value_error():
    """The mask form raised IndexError on CPU and a device-side assert on CUDA (which ends the
    CUDA context); the host check names the problem instead."""
    plan = small_plan(dict(text_id=1, ref_frame=0), dict(text_id=2, ref_frame=3))
    with pytest.raises(ValueError, match="reference frame 3"):
        embed_plan(plan, NoLookups(), device=torch.device("cpu"), dtype=torch.float32, hidden_size=HIDDEN,
                   ref_codes=torch.zeros(2, NUM_CODEBOOKS, dtype=torch.long))


def test_an_empty_plan_embeds_to_no_rows():
    out = embed_plan(PromptPlan(), NoLookups(), device=torch.device("cpu"), dtype=torch.float32, hidden_size=HIDDEN)
    assert out.shape == (0, HIDDEN)


@pytest.mark.parametrize("model_type", ["base", "custom_voice"])
def test_a_burst_embedded_together_equals_each_alone(model_type):
    """embed_prepared lays several prompts end to end (one index copy, one text and one codec lookup,
    the clones' x-vectors and reference frames gathered across prompts): each prompt's rows equal its
    embedding alone, up to the text projection's GEMM over more rows."""
    cases = [c for c in CASES if c[1] == model_type]
    built = [build_case(c[1], c[2], c[3], c[4], c[5], seed=10 + i) for i, c in enumerate(cases)]
    embedder = built[0][1]
    args = dict(device=torch.device("cpu"), dtype=torch.float32, hidden_size=HIDDEN)
    prepared = [prepare_plan(plan, hidden_size=HIDDEN, **inputs) for plan, _, inputs in built]
    together = embed_prepared(prepared, embedder, **args)
    assert [t.shape for t in together] == [(len(plan), HIDDEN) for plan, _, _ in built]
    for (plan, _, inputs), ours in zip(built, together):
        alone = embed_plan(plan, embedder, **args, **inputs)
        assert torch.allclose(ours, alone, rtol=1e-6, atol=1e-6), float((ours - alone).abs().max())
    if model_type == "base":   # the cases hold x-vector and in-context clones: both gathered paths ran
        assert sum(p.groups.frame_pos.size for p in prepared) > 0 and sum(p.groups.speaker_pos.size for p in prepared) > 1
    assert embed_prepared([], embedder, **args) == []
