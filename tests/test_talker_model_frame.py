"""The frame loop (talker step -> c0 sampling -> code predictor) against the official talker
generate, and seeded sampling reproducible across batch compositions."""
from __future__ import annotations

import pytest
import torch

from talker_service.model import FrameDecoder, SamplingParams, SlotSamplingTable
from test_talker_model_support import tiny_pair

EOS = 2150


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    official, ours, _ = tiny_pair(tmp_path_factory.mktemp("talker_frame"), "custom_voice", seed=21, max_slots=5,
                                  max_seq_len=64)
    return official, ours


def run_frames(decoder: FrameDecoder, prompts, trailing, pad, slots, num_frames):
    """Our generate loop for several requests advanced together: codes [n, num_frames, 16]."""
    model = decoder.model
    outs = [[] for _ in prompts]
    embeds, hidden, logits = [], [], []
    for slot, prompt in zip(slots, prompts):
        h, lg = model.prefill(prompt, slot)
        hidden.append(h)
        logits.append(lg)
    slot_t = torch.tensor(slots)
    steps = torch.zeros(len(slots), dtype=torch.long)
    frame = decoder.finish(torch.stack(hidden), torch.stack(logits), slot_t, steps)
    positions = torch.tensor([p.shape[0] for p in prompts])
    for g in range(num_frames):
        for row in range(len(prompts)):
            outs[row].append(frame.codes[row])
        if g == num_frames - 1:
            break
        text = torch.stack([t[g] if g < t.shape[0] else pad for t in trailing])
        steps = steps + 1
        frame = decoder.decode(frame.codec_embeds + text, slot_t, positions + g, steps)
    return torch.stack([torch.stack(o) for o in outs])


@torch.no_grad()
@pytest.mark.parametrize("penalty", [1.05, 0.2])  # 0.2 rewards repeats, so greedy c0 visibly depends on it
def test_greedy_frames_equal_official_talker_generate(pair, penalty):
    official, ours = pair
    torch.manual_seed(0)
    prompt, trailing, pad = torch.randn(9, 48), torch.randn(3, 48), torch.randn(48)
    num_frames = 7
    result = official.talker.generate(
        inputs_embeds=prompt[None], attention_mask=torch.ones(1, 9, dtype=torch.long),
        trailing_text_hidden=trailing[None], tts_pad_embed=pad[None, None],
        max_new_tokens=num_frames + 1, min_new_tokens=2, do_sample=False, repetition_penalty=penalty,
        subtalker_dosample=False, subtalker_top_k=50, subtalker_top_p=1.0, subtalker_temperature=0.9,
        eos_token_id=EOS, suppress_tokens=[i for i in range(2048, 3072) if i != EOS],
        output_hidden_states=True, return_dict_in_generate=True,
    )
    ref = torch.stack([h[-1] for h in result.hidden_states if h[-1] is not None], dim=1)[0]  # [frames, 16]
    assert ref.shape == (num_frames, 16) and EOS not in ref[:, 0].tolist()
    table = SlotSamplingTable(5, 3072, "cpu")
    table.assign(1, SamplingParams(do_sample=False, subtalker_dosample=False, repetition_penalty=penalty))
    codes = run_frames(FrameDecoder(ours, table, EOS), [prompt], [trailing], pad, [1], num_frames)[0]
    assert torch.equal(codes, ref)
    assert bool(table.history[1, ref[:, 0]].all())  # the penalty history saw every emitted c0
    if penalty < 1.0:
        assert len(set(ref[:, 0].tolist())) < num_frames


@torch.no_grad()
def test_seeded_frames_do_not_depend_on_batch_mates(pair):
    _, ours = pair
    gen = torch.Generator().manual_seed(1)
    prompt, trailing, pad = torch.randn(7, 48, generator=gen), torch.randn(4, 48, generator=gen), torch.randn(48, generator=gen)
    mine = SamplingParams(seed=42, temperature=1.0, top_k=0, subtalker_temperature=1.0, subtalker_top_k=0)
    table = SlotSamplingTable(5, 3072, "cpu")
    decoder = FrameDecoder(ours, table, EOS)
    table.assign(0, mine)
    alone = run_frames(decoder, [prompt], [trailing], pad, [0], 5)[0]
    # same request in slot 3, batched with two others of different lengths and settings
    mates = [torch.randn(n, 48, generator=gen) for n in (12, 4)]
    mate_text = [torch.randn(n, 48, generator=gen) for n in (1, 6)]
    table.assign(4, SamplingParams(seed=7, temperature=0.7, top_k=20))
    table.assign(3, mine)
    table.assign(0, SamplingParams(seed=9, do_sample=False))
    batched = run_frames(decoder, [mates[0], prompt, mates[1]], [mate_text[0], trailing, mate_text[1]], pad,
                         [4, 3, 0], 5)
    assert torch.equal(batched[1], alone)
    table.assign(2, SamplingParams(seed=43, temperature=1.0, top_k=0, subtalker_temperature=1.0, subtalker_top_k=0))
    other_seed = run_frames(decoder, [prompt], [trailing], pad, [2], 5)[0]
    assert not torch.equal(other_seed, alone)


def test_decode_frame_reads_no_device_data_on_the_host():
    """On the meta device every host read of tensor data (.item(), bool(), boolean-mask
    indexing, nonzero, .tolist()) raises, so a full frame that runs there issues no host syncs:
    the precondition for capturing it as one CUDA graph."""
    from checkpoint.configs import model_config
    from talker_service.model import TalkerConfig
    from talker_service.model.talker import build_empty

    config = TalkerConfig.from_dict(model_config("custom_voice", "tiny")["talker_config"])
    model = build_empty(config, "meta", torch.float32)
    model.init_runtime(max_slots=4, max_seq_len=32)
    decoder = FrameDecoder(model, SlotSamplingTable(4, 3072, "meta"), EOS, candidate_k=64)
    index = torch.empty(3, dtype=torch.long, device="meta")
    frame = decoder.decode(torch.empty(3, 48, device="meta"), index, index, index)
    assert frame.codes.shape == (3, 16) and frame.codec_embeds.shape == (3, 48)
    with pytest.raises((RuntimeError, NotImplementedError)):
        frame.codes.sum().item()
