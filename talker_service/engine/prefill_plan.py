"""Which prompt positions are prefilled this engine step, and in which padded shapes (no torch).

A prompt is prefilled in chunks of at most `max_chunk` positions. The chunks of one step are run
as at most two forwards: the fresh ones (each starts its prompt at position 0, so it attends over
itself only) and the continued ones (later chunks, which read the earlier positions of their slot
back from the KV cache). A forward of n chunks whose longest has m positions runs padded to
(prompts bucket >= n) x (length bucket >= m); a step takes chunks, in arrival order, while the sum
of those padded sizes stays within the token budget, shrinking a chunk to a smaller length bucket
when that lets it fit. The first chunk always fits (budget >= max chunk), so every step makes
progress, and no step spends more than the budget on prefill before the decode of the running
streams: that bounds the gap a burst of arrivals puts between two of their frames.

The graph table and the warm-up take their shapes from `PrefillShapes.all()`, the same buckets
the plan uses, so serving never meets a shape that was not captured and warmed.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass

FRESH = "fresh"          # chunk starts its prompt: attention over the chunk itself
CONTINUED = "continued"  # a later chunk: attention also over the slot's earlier positions
KINDS = (FRESH, CONTINUED)


@dataclass(frozen=True)
class PrefillShapes:
    prompt_buckets: tuple[int, ...]   # prompts per forward, padded up to one of these
    length_buckets: tuple[int, ...]   # positions per prompt, padded up to one of these
    token_budget: int                 # padded positions per step, both forwards together

    @classmethod
    def from_config(cls, config) -> "PrefillShapes":
        return cls(tuple(config.prefill_prompt_buckets()), tuple(config.prefill_length_buckets()),
                   config.prefill_token_budget)

    @property
    def max_chunk(self) -> int:
        return self.length_buckets[-1]

    @property
    def max_prompts(self) -> int:
        return self.prompt_buckets[-1]

    def prompt_bucket(self, num_prompts: int) -> int:
        return self.prompt_buckets[bisect.bisect_left(self.prompt_buckets, num_prompts)]

    def length_bucket(self, num_positions: int) -> int:
        return self.length_buckets[bisect.bisect_left(self.length_buckets, num_positions)]

    def cost(self, chunk_lens: list[int]) -> int:
        """Padded positions of one forward of these chunks (0 for none)."""
        if not chunk_lens:
            return 0
        return self.prompt_bucket(len(chunk_lens)) * self.length_bucket(max(chunk_lens))

    def all(self) -> list[tuple[str, int, int]]:
        """Every (kind, prompts bucket, length bucket) a plan can produce: those within the budget."""
        return [(kind, p, t) for kind in KINDS for p in self.prompt_buckets for t in self.length_buckets
                if p * t <= self.token_budget]


@dataclass
class PrefillJob:
    """One prompt being prefilled: its embeddings and how many positions are in the cache already."""
    key: object            # whatever the caller tracks (the engine's request)
    length: int            # prompt positions
    embeds: object = None  # the prompt's embeddings [length, H] (opaque here)
    done: int = 0          # positions prefilled by earlier chunks

    @property
    def kind(self) -> str:
        return FRESH if self.done == 0 else CONTINUED

    @property
    def remaining(self) -> int:
        return self.length - self.done


def plan_step(jobs: list[PrefillJob], shapes: PrefillShapes) -> list[tuple[PrefillJob, int]]:
    """(job, chunk length) for this step, in the jobs' order, within shapes.token_budget."""
    groups: dict[str, list[int]] = {kind: [] for kind in KINDS}
    chosen: list[tuple[PrefillJob, int]] = []
    for job in jobs:
        group = groups[job.kind]
        if len(group) >= shapes.max_prompts:
            continue                     # that forward is full; a job of the other kind may still fit
        other_cost = sum(shapes.cost(g) for kind, g in groups.items() if kind != job.kind)
        wanted = min(job.remaining, shapes.max_chunk)
        candidates = [wanted] + [t for t in reversed(shapes.length_buckets) if t < wanted]
        chunk = next((c for c in candidates if other_cost + shapes.cost(group + [c]) <= shapes.token_budget), 0)
        if chunk == 0:
            break                        # the budget is spent: later jobs wait, arrival order kept
        group.append(chunk)
        chosen.append((job, chunk))
    return chosen
