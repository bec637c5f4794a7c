"""The first frame of freshly prefilled requests on the graph path (issue #10).

After a prefill, the first frame is the decode step's tail: codebook-0 sampling from the prompt's
last logits, then the 15-position code predictor, then the frame's codec embedding. Run eagerly
that is the same thousand-odd small kernels the decode graph exists to avoid, and it was most of
the ~100 ms `prefill_ms` measured on the H200. So `FrameDecoder.finish` is captured once per
prefill batch bucket (powers of two up to max_prefill_batch): the prefill's hidden states and
logits are copied into static buffers, rows past the real ones point at the scratch slot (zero
hidden, zero logits; their sampling marks land on that slot only), and the graph replays.

`emulate=True` (CPU tests) runs the same padded static-buffer path eagerly; a batch larger than
the largest bucket runs eagerly and is counted.
"""
from __future__ import annotations

import bisect
import logging

import torch

from talker_service.engine.graphs import capture_graph
from talker_service.model import FrameDecoder
from talker_service.model.frame import FrameOutput

logger = logging.getLogger(__name__)


class CapturedFirstFrame:
    def __init__(self, frames: FrameDecoder, batch_size: int, scratch_slot: int, emulate: bool, pool=None) -> None:
        model = frames.model
        device, hidden_size, vocab = model.device, model.config.hidden_size, model.config.vocab_size
        self.frames, self.batch_size, self.scratch_slot = frames, batch_size, scratch_slot
        self.hidden = torch.zeros(batch_size, hidden_size, dtype=model.dtype, device=device)   # [B, H]
        self.logits = torch.zeros(batch_size, vocab, dtype=model.dtype, device=device)         # [B, vocab]
        self.slots = torch.full((batch_size,), scratch_slot, dtype=torch.long, device=device)  # [B]
        self.steps = torch.zeros(batch_size, dtype=torch.long, device=device)                  # [B] frame 0
        self.graph, self.out = None, None
        if not emulate:   # warm-up runs and capture touch the scratch slot only
            self.graph, self.out = capture_graph(self._finish, pool=pool)

    def _finish(self) -> FrameOutput:
        return self.frames.finish(self.hidden, self.logits, self.slots, self.steps)

    def run(self, hidden: torch.Tensor, logits: torch.Tensor, slots: torch.Tensor) -> FrameOutput:
        """hidden [n, H], logits [n, vocab], slots [n] (n <= batch_size) -> the first frames of those rows."""
        n = hidden.shape[0]
        self.hidden[:n].copy_(hidden)
        self.hidden[n:].zero_()
        self.logits[:n].copy_(logits)
        self.logits[n:].zero_()
        self.slots[:n].copy_(slots)
        self.slots[n:].fill_(self.scratch_slot)
        out = self._finish() if self.graph is None else (self.graph.replay() or self.out)
        return FrameOutput(codes=out.codes[:n], hidden=out.hidden[:n], codec_embeds=out.codec_embeds[:n])


class FirstFrameTable:
    def __init__(self, frames: FrameDecoder, max_batch: int, scratch_slot: int, emulate: bool, pool=None) -> None:
        if scratch_slot < 0:
            raise ValueError("the first-frame graphs pad onto the scratch slot: the runner must pad to buckets")
        self.frames = frames
        self.batch_sizes = [b for b in (1 << i for i in range(max_batch.bit_length() + 1)) if b < max_batch]
        self.batch_sizes.append(max_batch)
        self.graphs = {b: CapturedFirstFrame(frames, b, scratch_slot, emulate, pool) for b in self.batch_sizes}
        self.num_graph_runs = 0
        self.num_eager_runs = 0
        logger.info("%s first-frame graphs for prefill batches %s", "emulated" if emulate else "captured",
                    self.batch_sizes)

    def finish(self, hidden: torch.Tensor, logits: torch.Tensor, slots: torch.Tensor) -> FrameOutput:
        n = hidden.shape[0]
        i = bisect.bisect_left(self.batch_sizes, n)
        if i == len(self.batch_sizes):   # more prompts than max_prefill_batch: not expected, but correct
            self.num_eager_runs += 1
            return self.frames.finish(hidden, logits, slots, torch.zeros_like(slots))
        self.num_graph_runs += 1
        return self.graphs[self.batch_sizes[i]].run(hidden, logits, slots)
