"""Per-slot sampling state on device: parameters, seeds and the codebook-0 history mask.

A request's parameters are written into its slot's rows once at admission (host -> device,
outside any graph); the captured step then gathers rows by slot ids, so one graph serves any mix
of requests. The history mask [max_slots, vocab] records which c0 tokens a request generated
(the repetition penalty's input) with a scatter, also inside the graph.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from service_common.host_copy import to_device_async
from talker_service.model.sampling import RowSampling, SamplingParams


@dataclass
class SlotRows:
    """Everything sampling needs for a batch of rows, gathered by slot ([bs] each)."""

    talker: RowSampling
    subtalker: RowSampling
    repetition_penalty: torch.Tensor  # float32
    min_new_tokens: torch.Tensor  # int64
    seeds: torch.Tensor  # int64
    history: torch.Tensor  # bool [bs, vocab]


class SlotSamplingTable:
    """Per-slot sampling state, grouped by dtype into three tables so that gathering a batch's rows
    is three launches (one index_select per table) instead of one per parameter (12): the captured
    frame step is launch-bound at small batches. The named fields (`temperature`, `seeds`,
    `history`, ...) are column views of the tables; assign() writes through them."""

    FLOAT_FIELDS = ("temperature", "top_p", "sub_temperature", "sub_top_p", "repetition_penalty")  # float32
    INT_FIELDS = ("top_k", "sub_top_k", "min_new_tokens", "seeds")  # int64
    FLAG_FIELDS = ("do_sample", "sub_do_sample")  # bool: the history table's last two columns

    def __init__(self, max_slots: int, vocab_size: int, device):
        self.max_slots = max_slots
        self.vocab_size = vocab_size
        self.device = torch.device(device)
        self._floats = torch.ones(max_slots, len(self.FLOAT_FIELDS), dtype=torch.float32, device=device)
        self._ints = torch.zeros(max_slots, len(self.INT_FIELDS), dtype=torch.int64, device=device)
        # the history mask [max_slots, vocab] and the do_sample flags share one bool table: the
        # history is gathered every frame anyway, two more columns ride along for free
        self._bools = torch.zeros(max_slots, vocab_size + len(self.FLAG_FIELDS), dtype=torch.bool, device=device)
        for table, names, first_column in ((self._floats, self.FLOAT_FIELDS, 0), (self._ints, self.INT_FIELDS, 0),
                                           (self._bools, self.FLAG_FIELDS, vocab_size)):
            for column, name in enumerate(names, start=first_column):
                setattr(self, name, table[:, column])  # [max_slots] view
        self.history = self._bools[:, :vocab_size]
        # a device-resident True: index_put_ with a Python scalar may stage it through host memory,
        # which a CUDA graph capture would reject
        self._true = torch.ones((), dtype=torch.bool, device=device)

    def assign(self, slot: int, params: SamplingParams) -> None:
        """Write a request's parameters into `slot` and clear its history (not graph-safe: admission time)."""
        self.assign_many([slot], [params])

    def assign_many(self, slots: list[int], params: list[SamplingParams]) -> None:
        """assign() for several slots (distinct) at once: the rows are built on the host and written
        with one copy and one index_copy_ per table, instead of 12 scalar writes (12 launches) per
        request -- a burst of 256 admissions was ~3000 launches in the talker loop."""
        if len(slots) != len(params):
            raise ValueError(f"{len(slots)} slots for {len(params)} sampling parameter sets")
        for slot in slots:
            if not 0 <= slot < self.max_slots:
                raise ValueError(f"slot {slot} out of range [0, {self.max_slots})")
        if not slots:
            return
        floats = np.array([[p.temperature, p.top_p, p.subtalker_temperature, p.subtalker_top_p, p.repetition_penalty]
                           for p in params], dtype=np.float32)                   # FLOAT_FIELDS order
        ints = np.array([[p.top_k, p.subtalker_top_k, p.min_new_tokens, p.seed] for p in params],
                        dtype=np.int64)                                           # INT_FIELDS order
        bools = np.zeros((len(params), self._bools.shape[1]), dtype=np.bool_)    # history cleared
        bools[:, self.vocab_size] = [p.do_sample for p in params]                # FLAG_FIELDS order
        bools[:, self.vocab_size + 1] = [p.subtalker_dosample for p in params]
        index = to_device_async(torch.tensor(slots, dtype=torch.long), self.device)
        for table, rows in ((self._floats, floats), (self._ints, ints), (self._bools, bools)):
            table.index_copy_(0, index, to_device_async(torch.from_numpy(rows), self.device))

    def gather(self, slots: torch.Tensor) -> SlotRows:
        """Rows for `slots` [bs] (device tensor): three index_selects, graph-safe. The fields are
        column views [bs] of the gathered rows (strided; every consumer takes strides)."""
        floats, ints, bools = (table.index_select(0, slots) for table in (self._floats, self._ints, self._bools))
        f = dict(zip(self.FLOAT_FIELDS, floats.unbind(1)))
        i = dict(zip(self.INT_FIELDS, ints.unbind(1)))
        flags = dict(zip(self.FLAG_FIELDS, bools[:, self.vocab_size:].unbind(1)))
        return SlotRows(
            talker=RowSampling(f["temperature"], i["top_k"], f["top_p"], flags["do_sample"]),
            subtalker=RowSampling(f["sub_temperature"], i["sub_top_k"], f["sub_top_p"], flags["sub_do_sample"]),
            repetition_penalty=f["repetition_penalty"],
            min_new_tokens=i["min_new_tokens"],
            seeds=i["seeds"],
            history=bools[:, :self.vocab_size],
        )

    def record(self, slots: torch.Tensor, tokens: torch.Tensor) -> None:
        """Mark c0 `tokens` [bs] as generated by `slots` [bs] (graph-safe scatter)."""
        self.history.index_put_((slots, tokens), self._true)
