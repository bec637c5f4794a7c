"""Runs one engine step's prompt chunks: at most one forward per kind, graph or counted fallback.

Padded (CUDA, or emulated graphs): a forward of n chunks runs in the (prompts bucket, length
bucket) shape that `prefill_plan` chose, replaying its captured graph; a shape without a graph
runs the same step eagerly on the same kind of static buffers and is counted
(num_prefill_eager_steps). Unpadded (CPU without graphs): the chunks run eagerly at their own
sizes and only the chunks that end their prompt are sampled.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch

from service_common.host_copy import HostCopy, WaitClock, to_device_async
from talker_service.engine.graphs import GraphStats
from talker_service.engine.prefill_graphs import CapturedPrefill, PrefillGraphTable, PrefillStep
from talker_service.engine.prefill_plan import FRESH, KINDS, PrefillShapes

logger = logging.getLogger(__name__)


@dataclass
class PrefillChunk:
    slot: int
    embeds: torch.Tensor   # [n, H]: prompt positions start..start+n-1
    start: int
    is_last: bool          # ends its prompt: the first frame is sampled from its last position


class PendingPrefill:
    """A step's prefill forwards, queued: `wait()` -> codes [k, 16] int64 of frame 0 of the chunks
    that end their prompt, in the chunks' order."""

    def __init__(self, copies: list[HostCopy], order: list[int], is_last: list[bool]) -> None:
        self.copies, self.order, self.is_last = copies, order, is_last   # one copy per forward, in order

    def wait(self, clock: WaitClock | None = None) -> np.ndarray:
        if not self.copies:
            return np.zeros((0, 16), dtype=np.int64)
        rows = np.concatenate([copy.wait(clock) for copy in self.copies])
        by_index = dict(zip(self.order, rows))
        return np.stack([by_index[i] for i, last in enumerate(self.is_last) if last])


class Prefiller:
    def __init__(self, step: PrefillStep, shapes: PrefillShapes, scratch_slot: int, stats: GraphStats,
                 graphs: PrefillGraphTable | None) -> None:
        self.step, self.shapes, self.scratch_slot, self.stats, self.graphs = step, shapes, scratch_slot, stats, graphs
        self.is_padding = scratch_slot >= 0
        self._eager_shapes: dict[tuple[str, int, int], CapturedPrefill] = {}   # fallback buffers, made on first use

    def padding_row(self) -> list[int]:
        """Index-row values of a padding row: the scratch slot from position 0, sampled there."""
        return [self.scratch_slot, 0, 0, self.scratch_slot]

    @torch.no_grad()
    def launch(self, chunks: list[PrefillChunk]) -> PendingPrefill:
        """The forwards queued, each with its first frames' copy to the host; `.wait()` -> codes
        [k, 16] int64 of frame 0 of the k chunks that end their prompt, in their order."""
        for chunk in chunks:
            if chunk.embeds.shape[0] < 1 or chunk.embeds.shape[0] > self.shapes.max_chunk:
                raise ValueError(f"a prefill chunk has 1..{self.shapes.max_chunk} positions, "
                                 f"got {chunk.embeds.shape[0]}")
        if len({c.slot for c in chunks}) != len(chunks):
            raise ValueError(f"prefill chunks need distinct slots, got {[c.slot for c in chunks]}")
        order, outputs = [], []
        for kind in KINDS:
            group = [(i, c) for i, c in enumerate(chunks) if (c.start == 0) == (kind == FRESH)]
            if not group:
                continue
            if len(group) > self.shapes.max_prompts:
                raise ValueError(f"{len(group)} {kind} chunks exceed max_prefill_batch={self.shapes.max_prompts}")
            ends = [i for i, c in group if c.is_last]
            codes = self._forward(kind, [c for _, c in group])
            if codes is not None:
                order += ends
                outputs.append(codes)
        return PendingPrefill(outputs, order, [c.is_last for c in chunks])

    def _forward(self, kind: str, chunks: list[PrefillChunk]) -> HostCopy | None:
        """One forward of same-kind chunks -> the codes of those that end their prompt, on their way
        to the host (None: none do). The copy is queued right after the forward: the other kind's
        replay may reuse this graph's output memory (all graphs share one pool)."""
        lengths = [c.embeds.shape[0] for c in chunks]
        ends = [i for i, c in enumerate(chunks) if c.is_last]
        if not self.is_padding:
            codes = self._forward_unpadded(kind, chunks, lengths, ends)
            return None if codes is None else HostCopy(codes)
        shape = (kind, self.shapes.prompt_bucket(len(chunks)), self.shapes.length_bucket(max(lengths)))
        rows = np.array([[c.slot for c in chunks], [c.start for c in chunks], [n - 1 for n in lengths],
                         [c.slot if c.is_last else self.scratch_slot for c in chunks]], dtype=np.int64)   # [4, n]
        codes = self._shape(shape, sum(lengths)).run([c.embeds for c in chunks], rows)
        if not ends:
            return None
        if len(ends) < len(chunks):
            codes = codes[to_device_async(torch.tensor(ends), codes.device)]   # (to_device_async: no stream sync)
        return HostCopy(codes)

    def _shape(self, shape: tuple[str, int, int], num_real_tokens: int) -> CapturedPrefill:
        """The captured step of this shape, or (counted) the same step eagerly on buffers of that shape."""
        graph = self.graphs.find(*shape) if self.graphs is not None else None
        if graph is not None:
            self.stats.num_prefill_graph_steps += 1
        else:
            graph = self._eager_shapes.get(shape)
            if graph is None:
                graph = self._eager_shapes[shape] = CapturedPrefill(self.step, *shape, self.padding_row(),
                                                                    emulate=True)
            self.stats.num_prefill_eager_steps += 1
        self.stats.prefill_shape_histogram[shape] += 1
        self.stats.num_prefill_padding_tokens += shape[1] * shape[2] - num_real_tokens
        return graph

    def run_padding(self, shape: tuple[str, int, int]) -> torch.Tensor:
        """The step of `shape` with padding rows only, through the serving lookup (warm-up)."""
        if not self.is_padding:
            raise ValueError("prefill shapes exist only when padding (a scratch slot takes the rows)")
        kind, _, num_positions = shape
        model = self.step.model
        chunk = torch.zeros(num_positions, model.config.hidden_size, dtype=model.dtype, device=model.device)
        row = [self.scratch_slot, 0 if kind == FRESH else 1, num_positions - 1, self.scratch_slot]
        rows = np.asarray(row, dtype=np.int64)[:, None]
        return self._shape(shape, num_positions).run([chunk], rows)

    def _forward_unpadded(self, kind: str, chunks: list[PrefillChunk], lengths: list[int],
                          ends: list[int]) -> torch.Tensor | None:
        model = self.step.model
        device = model.device
        embeds = torch.zeros(len(chunks), max(lengths), model.config.hidden_size, dtype=model.dtype, device=device)
        for i, chunk in enumerate(chunks):
            embeds[i, :lengths[i]] = chunk.embeds
        as_rows = lambda values: torch.tensor(values, dtype=torch.long, device=device)  # noqa: E731
        hidden = self.step.forward(embeds, as_rows([c.slot for c in chunks]), as_rows([c.start for c in chunks]),
                                   as_rows([n - 1 for n in lengths]), kind)                     # [n, H]
        self.stats.num_prefill_eager_steps += 1
        self.stats.prefill_shape_histogram[(kind, len(chunks), max(lengths))] += 1
        if not ends:
            return None
        return self.step.first_frames(hidden[as_rows(ends)], as_rows([chunks[i].slot for i in ends]))
