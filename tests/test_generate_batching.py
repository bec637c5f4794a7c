"""Batch independence and streaming text input through the offline runner.

A request's sampled codes depend only on its own seed and inputs: alone, batched with others, at
another batch row, or with its text arriving token by token while other requests keep
generating (the request is parked, not padded, while its next token is missing).
"""
from __future__ import annotations

import dataclasses

import pytest
import torch

from checkpoint.configs import model_config
from talker_service.generate import SynthesisRequest, Synthesizer
from talker_service.generate_batch import BatchRunner
from talker_service.model import SamplingParams
from talker_service.prompt import new_text_feed
from test_prompt_oracle import official_model, random_text_ids
from test_talker_model_support import save_official
from test_prompt_oracle import one_torch_thread  # noqa: F401  (autouse: one intra-op thread)


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    official = official_model("custom_voice", seed=3)
    directory = save_official(official, model_config("custom_voice", "tiny"), tmp_path_factory.mktemp("cv"))
    return Synthesizer.from_pretrained(directory, max_slots=4, max_seq_len=128)


def sampled(seed: int, **overrides) -> SamplingParams:
    return SamplingParams(max_new_tokens=10, seed=seed, **overrides)


def requests():
    g = torch.Generator().manual_seed(7)
    target = SynthesisRequest(text_ids=random_text_ids(g, 6), voice="vivian", language="english", sampling=sampled(123),
                              non_streaming_mode=False)
    others = [
        SynthesisRequest(text_ids=random_text_ids(g, 3), voice="ryan", language="auto", sampling=sampled(5)),
        SynthesisRequest(text_ids=random_text_ids(g, 9), voice="eric", language="chinese",
                         sampling=sampled(6, temperature=0.5, top_k=5, subtalker_top_p=0.8), non_streaming_mode=False),
        SynthesisRequest(text_ids=random_text_ids(g, 2), voice="sohee", language="korean",
                         sampling=SamplingParams(do_sample=False, subtalker_dosample=False, max_new_tokens=6, seed=0)),
    ]
    return target, others


def test_sampled_codes_do_not_depend_on_batch_mates(synth):
    target, others = requests()
    alone = synth.generate_codes([target])[0]
    first = synth.generate_codes([target] + others)[0]
    last = synth.generate_codes(others + [target])[-1]
    assert alone.shape[0] > 2
    assert torch.equal(alone, first) and torch.equal(alone, last)
    reseeded = synth.generate_codes([dataclasses.replace(target, sampling=sampled(124))])[0]
    assert not torch.equal(alone, reseeded)   # the seed really drives the samples


def test_text_arriving_while_generating_equals_all_at_once(synth):
    target, others = requests()
    expected = synth.generate_codes([target, others[1]])

    runner = BatchRunner(synth.talker, synth.vocab)
    prompt, _, sampling = synth.prepare(target)
    feed = new_text_feed(synth.vocab, prompt)              # open and empty: text comes later
    other_prompt, other_feed, other_sampling = synth.prepare(others[1])
    other_feed.close()
    runner.submit("other", other_prompt, other_feed, other_sampling)
    runner.submit("target", prompt, feed, sampling)

    pending = list(target.text_ids)
    parked_while_other_ran = 0
    for tick in range(200):
        if not runner.has_work:
            break
        if tick % 3 == 2 and pending:   # one token every third step
            feed.push([pending.pop(0)])
        elif not pending and not feed.is_closed:
            feed.close()
        frames = {row.key: len(row.frames) for row in runner.active}
        runner.step()
        after = {row.key: len(row.frames) for row in runner.active}
        other_moved = after.get("other", 99) > frames.get("other", 0)
        target_moved = "target" not in frames or after.get("target", 99) > frames["target"]
        parked_while_other_ran += other_moved and not target_moved
    assert not runner.has_work
    assert parked_while_other_ran > 0
    assert torch.equal(runner.finished["target"].codes, expected[0])
    assert torch.equal(runner.finished["other"].codes, expected[1])
