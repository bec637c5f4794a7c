"""The captured decode step on a GPU: replays through both pinned staging buffers (steps overlapped,
as the engine's async decode queues them) give the codes of the same steps run eagerly with the
same padding. CPU runs skip this file; the graph path's logic is covered there in emulate mode
(test_talker_graphs.py)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from checkpoint.files import resolve_model_dir
from service_common.host_copy import HostCopy
from talker_service.engine import EngineConfig, ModelRunner
from talker_service.model import SamplingParams

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")

SLOTS = 4   # steps use 2-3 of them: the rest of the batch-4 graph is padding on the scratch slot


def runner(graphs: str) -> ModelRunner:
    config = EngineConfig(max_slots=SLOTS, max_seq_len=64, batch_buckets=(4,), decode_graphs=graphs,
                          pad_to_buckets=True, warm_up=False)
    run = ModelRunner.from_checkpoint(resolve_model_dir("tiny"), config, device="cuda")
    greedy = SamplingParams(do_sample=False, subtalker_dosample=False, min_new_tokens=0, seed=0)
    run.assign_many(list(range(SLOTS)), [greedy] * SLOTS)
    return run


def test_overlapped_replays_through_both_staging_buffers_equal_eager_steps():
    captured, eager = runner("capture"), runner("off")
    steps = [([0, 1, 2], [5, 6, 7], [1, 1, 1], [400, 401, 402]),
             ([2, 0], [8, 6], [2, 2], [403, 404]),
             ([1, 2, 0], [7, 9, 7], [2, 3, 3], [405, 406, 407])]
    # all three queued before any is read: step k+1's rows are staged while step k may still upload
    pending = [HostCopy(captured.graphs.find(len(s[0])).run(np.array(s, dtype=np.int64)).clone()) for s in steps]
    got = [p.wait() for p in pending]
    want = [eager.decode(*s) for s in steps]
    assert captured.graph_stats.num_graphs >= 1
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
