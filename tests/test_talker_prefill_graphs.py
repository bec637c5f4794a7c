"""Prefill on the graph path (emulated on CPU: the same static buffers, padding and lookup as CUDA
graph replay, run eagerly): prompt chunks plus the first frame's codebook-0 sampling and code
predictor, per (kind, prompts bucket, length bucket).

Every prompt must get exactly the first-frame codes of the eager prefill the runner used before
prefill graphs (TalkerModel.prefill + FrameDecoder.finish, one prompt at a time), for the same
seed, whatever it is batched with, padded to, or split into; an uncaptured shape runs eagerly
and is counted.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from talker_service.engine.prefiller import PrefillChunk
from talker_service.model import SamplingParams
from test_talker_engine import CASES, alone
from test_talker_engine_support import make_engine, text_ids
from test_vocoder_process_support import one_cpu_thread

LENGTHS = (5, 12, 23, 40)        # prompt positions: buckets 16, 16, 32, 64
SEEDS = (101, 102, 103, 104)


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    with one_cpu_thread():
        yield


@pytest.fixture(scope="module")
def prompts():
    gen = torch.Generator().manual_seed(0)
    return [torch.randn(n, 48, generator=gen) for n in LENGTHS]


def sampling(seed: int) -> SamplingParams:
    return SamplingParams(seed=seed, min_new_tokens=0)


@torch.no_grad()
def todays_prefill(runner, embeds: torch.Tensor, slot: int) -> np.ndarray:
    """The runner's eager prefill before prefill graphs: one prompt, then FrameDecoder.finish."""
    hidden, logits = runner.model.prefill(embeds, slot)
    slots = torch.tensor([slot])
    out = runner.frames.finish(hidden[None], logits[None], slots, torch.zeros(1, dtype=torch.long))
    runner.codec_embeds[slots] = out.codec_embeds.to(runner.codec_embeds.dtype)
    return out.codes.cpu().numpy()[0]


@pytest.fixture(scope="module")
def reference(prompts):
    """Per prompt: first-frame codes, its KV rows and its codec embedding from today's eager path."""
    runner = make_engine(max_slots=4, decode_graphs="off", pad_to_buckets=False).runner
    out = []
    for slot, (embeds, seed) in enumerate(zip(prompts, SEEDS)):
        runner.assign(slot, sampling(seed))
        codes = todays_prefill(runner, embeds, slot)
        n = embeds.shape[0]
        out.append((codes, runner.model.cache.k[:, slot, :, :n].clone(), runner.codec_embeds[slot].clone()))
    return out


def check_against_reference(runner, slots, codes, reference):
    for row, slot in enumerate(slots):
        want_codes, want_k, want_embed = reference[row]
        assert np.array_equal(codes[row], want_codes), f"prompt {row}: first frame differs from the eager prefill"
        n = want_k.shape[2]
        torch.testing.assert_close(runner.model.cache.k[:, slot, :, :n], want_k, rtol=0, atol=1e-5)
        torch.testing.assert_close(runner.codec_embeds[slot], want_embed, rtol=0, atol=1e-5)


def test_batched_graph_prefill_gives_the_eager_codes(prompts, reference):
    runner = make_engine(max_slots=4, decode_graphs="emulate").runner
    slots = [3, 0, 2, 1]                       # not in prompt order: rows are independent of slots
    for slot, seed in zip(slots, SEEDS):
        runner.assign(slot, sampling(seed))
    runner.model.cache.k.normal_()             # stale rows of earlier occupants must not matter
    runner.model.cache.v.normal_()
    codes = runner.prefill([PrefillChunk(s, e, 0, True) for s, e in zip(slots, prompts)])
    check_against_reference(runner, slots, codes, reference)
    stats = runner.graph_stats
    assert stats.num_prefill_graph_steps == 1 and stats.num_prefill_eager_steps == 0   # one forward, 4 prompts
    assert dict(stats.prefill_shape_histogram) == {("fresh", 4, 64): 1}
    assert stats.num_prefill_padding_tokens == 4 * 64 - sum(LENGTHS)


def test_prompts_padded_alone_and_in_smaller_buckets_give_the_eager_codes(prompts, reference):
    runner = make_engine(max_slots=4, decode_graphs="emulate").runner
    for slot, (embeds, seed) in enumerate(zip(prompts, SEEDS)):   # bucket (1, 16), (1, 16), (1, 32), (1, 64)
        runner.assign(slot, sampling(seed))
        codes = runner.prefill([PrefillChunk(slot, embeds, 0, True)])
        check_against_reference(runner, [slot], codes, reference[slot:slot + 1])
    runner2 = make_engine(max_slots=4, decode_graphs="emulate").runner   # (3 prompts -> bucket 4, 32)
    for slot, seed in zip((0, 1, 2), SEEDS[:3]):
        runner2.assign(slot, sampling(seed))
    codes = runner2.prefill([PrefillChunk(s, e, 0, True) for s, e in zip((0, 1, 2), prompts[:3])])
    check_against_reference(runner2, [0, 1, 2], codes, reference[:3])
    assert dict(runner2.graph_stats.prefill_shape_histogram) == {("fresh", 4, 32): 1}


@pytest.mark.parametrize("graphs", ["emulate", "off"])
def test_chunked_prefill_gives_the_eager_codes(prompts, reference, graphs):
    """40 positions in chunks of 8 (padded to 16: its padding lands where the next chunk writes),
    16 and 16, the later ones reading the cache back; the other prompts ride along in the same
    forwards, ending in the first two."""
    runner = make_engine(max_slots=4, decode_graphs=graphs, pad_to_buckets=graphs == "emulate",
                         prefill_chunk_tokens=16, prefill_token_budget=64).runner
    for slot, seed in enumerate(SEEDS):
        runner.assign(slot, sampling(seed))
    runner.model.cache.k.normal_()             # stale rows of earlier occupants must not matter
    runner.model.cache.v.normal_()
    got = {}
    plan = [  # per call: (slot, start, length)
        [(0, 0, 5), (1, 0, 12), (2, 0, 16), (3, 0, 8)],
        [(2, 16, 7), (3, 8, 16)],
        [(3, 24, 16)],
    ]
    for call in plan:
        chunks = [PrefillChunk(s, prompts[s][start:start + n], start, start + n == LENGTHS[s]) for s, start, n in call]
        codes = runner.prefill(chunks)
        ends = [c.slot for c in chunks if c.is_last]
        assert len(codes) == len(ends)
        got.update(zip(ends, codes))
    check_against_reference(runner, [0, 1, 2, 3], [got[s] for s in range(4)], reference)
    stats = runner.graph_stats
    if graphs == "emulate":
        assert runner.prefill_shapes.length_buckets == (16,)
        assert dict(stats.prefill_shape_histogram) == {("fresh", 4, 16): 1, ("continued", 2, 16): 1,
                                                       ("continued", 1, 16): 1}
        assert stats.num_prefill_graph_steps == 3 and stats.num_prefill_eager_steps == 0
    else:
        assert stats.num_prefill_eager_steps == 3


def test_an_uncaptured_shape_runs_eagerly_is_counted_and_gives_the_same_codes(prompts, reference):
    runner = make_engine(max_slots=4, decode_graphs="emulate").runner
    del runner.prefiller.graphs.graphs[("fresh", 4, 64)]
    for slot, seed in enumerate(SEEDS):
        runner.assign(slot, sampling(seed))
    codes = runner.prefill([PrefillChunk(s, e, 0, True) for s, e in enumerate(prompts)])
    check_against_reference(runner, [0, 1, 2, 3], codes, reference)
    stats = runner.graph_stats
    assert stats.num_prefill_eager_steps == 1 and stats.num_prefill_graph_steps == 0
    summary = stats.summary()
    assert summary["num_prefill_eager_steps"] == 1 and summary["prefill_hit_rate"] == 0.0
    assert summary["prefill_shape_histogram"] == {"fresh_p4_t64": 1}


def test_engine_with_small_chunks_and_budget_gives_each_request_its_codes():
    """The whole generation through the engine: prompts split into chunks of 8 over several steps,
    a budget of 16 padded positions per step, graphs emulated: every request's frames equal the
    eager engine's with whole prompts."""
    eager = make_engine(max_slots=4, decode_graphs="off", pad_to_buckets=False)
    expected = {i: alone(eager, f"a{i}", text_ids(i, n), seed, greedy=greedy, streaming=streaming, speaker=spk)
                for i, (n, seed, greedy, streaming, spk) in enumerate(CASES)}
    for overrides in (dict(decode_graphs="emulate"), dict(decode_graphs="off", pad_to_buckets=False)):
        engine = make_engine(max_slots=4, prefill_chunk_tokens=8, prefill_token_budget=16,
                             prefill_token_buckets=(4, 8), **overrides)
        for i, (n, seed, greedy, streaming, spk) in enumerate(CASES):
            codes = alone(engine, f"c{i}", text_ids(i, n), seed, greedy=greedy, streaming=streaming, speaker=spk)
            assert np.array_equal(codes, expected[i]), f"request {i} ({overrides}): chunked prefill changed its codes"
        assert engine.stats.num_prefill_chunks > 2 * len(CASES), "prompts of 10+ positions should take 2+ chunks"


def test_graph_stats_summary_has_every_admin_graph_field():
    """The admin GetStats GraphStats is filled from this summary by name (server/stats.py)."""
    from protos.tts.internal.v1 import admin_pb2

    summary = make_engine(max_slots=2, decode_graphs="emulate").runner.graph_stats.summary()
    assert set(admin_pb2.GraphStats.DESCRIPTOR.fields_by_name) <= set(summary)
    admin_pb2.GraphStats(**{name: summary[name] for name in admin_pb2.GraphStats.DESCRIPTOR.fields_by_name})


def test_a_failed_prefill_capture_leaves_the_talker_serving_eagerly_and_counted(prompts, reference, monkeypatch):
    from talker_service.engine import prefill_graphs

    real = prefill_graphs.CapturedPrefill

    def failing(step, kind, num_prompts, num_positions, *args):
        if (kind, num_prompts, num_positions) == ("fresh", 2, 32):
            raise RuntimeError("operation not permitted when stream is capturing")
        return real(step, kind, num_prompts, num_positions, *args)

    monkeypatch.setattr(prefill_graphs, "CapturedPrefill", failing)
    runner = make_engine(max_slots=4, decode_graphs="emulate").runner
    monkeypatch.undo()
    stats = runner.graph_stats
    assert len(runner.prefiller.graphs) == 0 and stats.num_prefill_graphs == 0 and stats.prefill_capture_failed
    assert stats.num_graphs > 0                                       # the decode graphs are untouched
    for slot, seed in enumerate(SEEDS):
        runner.assign(slot, sampling(seed))
    codes = runner.prefill([PrefillChunk(s, e, 0, True) for s, e in enumerate(prompts)])
    check_against_reference(runner, [0, 1, 2, 3], codes, reference)
    assert stats.num_prefill_eager_steps == 1 and stats.num_prefill_graph_steps == 0


@pytest.mark.parametrize("kind", ["fresh", "continued"])
def test_the_captured_prefill_step_reads_no_device_data_on_the_host(kind):
    """The whole captured function (chunk forward, last-position pick, c0 sampling, code predictor,
    history mark, codec embedding write) on the meta device, where any host read of tensor data
    raises: it issues no host syncs, the precondition for capturing it as one CUDA graph."""
    from checkpoint.configs import model_config
    from talker_service.engine.prefill_graphs import PrefillStep
    from talker_service.model import FrameDecoder, SlotSamplingTable, TalkerConfig
    from talker_service.model.talker import build_empty

    config = TalkerConfig.from_dict(model_config("custom_voice", "tiny")["talker_config"])
    model = build_empty(config, "meta", torch.float32)
    model.init_runtime(max_slots=4, max_seq_len=32)
    frames = FrameDecoder(model, SlotSamplingTable(4, config.vocab_size, "meta"), config.vocab_size - 1000,
                          candidate_k=64)
    step = PrefillStep(model, frames, torch.empty(4, config.hidden_size, device="meta"))
    codes = step(torch.empty(2, 16, config.hidden_size, device="meta"),
                 torch.empty(4, 2, dtype=torch.long, device="meta"), kind)
    assert codes.shape == (2, 16)
    with pytest.raises((RuntimeError, NotImplementedError)):
        codes.sum().item()
