"""The talker LM: embeddings, 28-layer backbone over a static per-slot KV cache, codec head,
and the code predictor, holding the official `talker.*` tensors under the same names.

Prefill writes a prompt into one slot; `decode_step` advances any set of slots by one position
each (rows at different lengths) with device-side indices only, so the service can capture it,
together with sampling and the predictor (`frame.py`), as one CUDA graph.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from kernels.small_m_linear import linear
from talker_service.model.config import TalkerConfig
from talker_service.model.kv_cache import SlotChunkView, SlotDecodeView, SlotKVCache, SlotPrefillView, causal_mask
from talker_service.model.layers import DecoderStack, rope_tables
from talker_service.model.loader import load_talker_weights, read_talker_config, resolve_checkpoint_dir
from talker_service.model.predictor import CodePredictor
from talker_service.model.sampling import RowSampling

logger = logging.getLogger(__name__)


class TalkerBackbone(DecoderStack):
    """`talker.model.*`: layers, norm, codec_embedding [vocab, H], text_embedding [text_vocab, text_H]."""

    def __init__(self, config: TalkerConfig):
        super().__init__(config)
        self.codec_embedding = nn.Embedding(config.vocab_size, config.hidden_size)
        self.text_embedding = nn.Embedding(config.text_vocab_size, config.text_hidden_size)


class TextProjection(nn.Module):
    """`talker.text_projection`: fc1 (bias) -> SiLU -> fc2 (bias), text width -> talker width."""

    def __init__(self, text_hidden_size: int, hidden_size: int):
        super().__init__()
        self.linear_fc1 = nn.Linear(text_hidden_size, text_hidden_size, bias=True)
        self.linear_fc2 = nn.Linear(text_hidden_size, hidden_size, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        fc1, fc2 = self.linear_fc1, self.linear_fc2
        return linear(F.silu(linear(x, fc1.weight, fc1.bias)), fc2.weight, fc2.bias)


class TalkerModel(nn.Module):
    def __init__(self, config: TalkerConfig):
        super().__init__()
        self.config = config
        self.model = TalkerBackbone(config)
        self.text_projection = TextProjection(config.text_hidden_size, config.hidden_size)
        self.codec_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.code_predictor = CodePredictor(config.code_predictor, config.hidden_size)
        self.cache: SlotKVCache | None = None
        self._rope: tuple[torch.Tensor, torch.Tensor] | None = None
        self._residual_tables: torch.Tensor | None = None
        self._residual_offsets: torch.Tensor | None = None

    @classmethod
    def from_checkpoint(cls, path_or_dir: str | Path, device: str | torch.device = "cpu",
                        dtype: torch.dtype = torch.bfloat16, max_slots: int = 1, max_seq_len: int = 2048) -> "TalkerModel":
        """The talker of a checkpoint directory (or a name the project's resolver knows), with its
        runtime (KV cache of max_slots x max_seq_len) allocated."""
        directory = resolve_checkpoint_dir(path_or_dir)
        started_s = time.perf_counter()
        model = build_empty(read_talker_config(directory), device, dtype)
        load_talker_weights(model, directory)
        model.init_runtime(max_slots=max_slots, max_seq_len=max_seq_len)
        logger.info("loaded talker from %s (%s, %s) in %.1f s", directory, device, dtype,
                    time.perf_counter() - started_s)
        return model

    # ---- runtime state -------------------------------------------------------------------

    @property
    def dtype(self) -> torch.dtype:
        return self.codec_head.weight.dtype

    @property
    def device(self) -> torch.device:
        return self.codec_head.weight.device

    def init_runtime(self, max_slots: int, max_seq_len: int) -> None:
        """Allocate the slot KV cache and derived tables (after weights are loaded/placed)."""
        cfg = self.config
        self.cache = SlotKVCache(cfg.num_hidden_layers, max_slots, cfg.num_key_value_heads, max_seq_len,
                                 cfg.head_dim, self.dtype, self.device)
        self._rope = rope_tables(cfg.head_dim, cfg.rope_theta, max_seq_len, self.dtype, self.device)
        self.code_predictor.init_runtime()
        self.model.fuse_projections()
        self._fuse_residual_tables()

    def _fuse_residual_tables(self) -> None:
        """Re-home the 15 residual embedding tables into one [15*vocab, H] tensor (their weights
        become views of it), so embedding a frame is one gather + one sum instead of 15 lookups."""
        tables = self.code_predictor.model.codec_embedding
        fused = torch.stack([t.weight.detach() for t in tables])  # [15, vocab, H]
        for i, table in enumerate(tables):
            table.weight = nn.Parameter(fused[i], requires_grad=False)
        self._residual_tables = fused.view(-1, fused.shape[-1])
        # row offset of table i in the fused tensor, built once here rather than in every frame step
        self._residual_offsets = torch.arange(len(tables), device=fused.device) * fused.shape[1]

    def _require_runtime(self) -> None:
        if self.cache is None:
            raise RuntimeError("TalkerModel has no KV cache; call init_runtime(max_slots, max_seq_len) first")

    def free_slot(self, slot: int) -> None:
        """Release a slot. Nothing to clear: a new prefill overwrites the positions it will read."""
        self._require_runtime()
        self.cache.check_slot(slot)

    # ---- embeddings ----------------------------------------------------------------------

    def embed_text(self, ids: torch.Tensor) -> torch.Tensor:
        """ids [...] -> [..., H]: text_projection(text_embedding(ids))."""
        return self.text_projection(self.model.text_embedding(ids))

    def embed_codec(self, ids: torch.Tensor) -> torch.Tensor:
        """ids [...] -> [..., H]: the talker codec table (c0, control, language and speaker ids)."""
        return self.model.codec_embedding(ids)

    def embed_frame(self, codes: torch.Tensor) -> torch.Tensor:
        """codes [..., 16] -> [..., H]: C(c0) + sum_i predictor.codec_embedding[i-1](c_i)."""
        first = self.model.codec_embedding(codes[..., 0])
        if self._residual_tables is None:
            rest = sum(t(codes[..., i + 1]) for i, t in enumerate(self.code_predictor.model.codec_embedding))
            return first + rest
        rest = F.embedding(codes[..., 1:] + self._residual_offsets, self._residual_tables)  # [..., 15, H]
        return first + rest.sum(-2)

    # ---- talker forward ------------------------------------------------------------------

    def _head(self, hidden: torch.Tensor) -> torch.Tensor:
        return linear(hidden, self.codec_head.weight).float()

    def prefill(self, embeds: torch.Tensor, slot: int, start_position: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """embeds [L, H] at positions start..start+L-1 of `slot` -> (hidden [H] post-norm, logits [vocab]) of the last."""
        self._require_runtime()
        self.cache.check_slot(slot)
        length = embeds.shape[0]
        if length < 1:
            raise ValueError("prefill needs at least one position")
        self.cache.check_span(start_position + length)
        cos_table, sin_table = self._rope
        cos = cos_table[start_position:start_position + length][None]
        sin = sin_table[start_position:start_position + length][None]
        slots = torch.tensor([slot], device=self.device)
        view = SlotPrefillView(self.cache, slots, start_position, length)
        mask = causal_mask(start_position, length, self.device)
        hidden = self.model.run(embeds.to(self.dtype)[None], cos, sin, view, mask)[0, -1]
        return hidden, self._head(hidden)

    def prefill_batch(self, embeds: list[torch.Tensor], slots: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Several fresh prompts at once (right-padded): -> (hidden [n, H], logits [n, vocab])."""
        self._require_runtime()
        if len(embeds) != len(slots) or len(set(slots)) != len(slots):
            raise ValueError(f"prefill_batch needs one distinct slot per prompt, got {len(embeds)} prompts, slots {slots}")
        for slot in slots:
            self.cache.check_slot(slot)
        lengths = [e.shape[0] for e in embeds]
        max_len = max(lengths)
        self.cache.check_span(max_len)
        x = torch.zeros(len(embeds), max_len, self.config.hidden_size, dtype=self.dtype, device=self.device)
        for i, e in enumerate(embeds):
            x[i, : e.shape[0]] = e.to(self.dtype)
        cos_table, sin_table = self._rope
        n = len(embeds)
        cos = cos_table[:max_len].expand(n, max_len, -1)
        sin = sin_table[:max_len].expand(n, max_len, -1)
        view = SlotPrefillView(self.cache, torch.tensor(slots, device=self.device), 0, max_len)
        out = self.model.run(x, cos, sin, view, causal_mask(0, max_len, self.device))  # [n, max_len, H]
        last = torch.tensor(lengths, device=self.device) - 1
        hidden = out[torch.arange(n, device=self.device), last]
        return hidden, self._head(hidden)

    def prefill_chunk(self, embeds: torch.Tensor, slots: torch.Tensor, starts: torch.Tensor,
                      span: int | None = None) -> torch.Tensor:
        """embeds [P, T, H]: row p holds positions starts[p].. of slots[p] (right-padded past its real
        length) -> post-norm hidden [P, T, H]. span None: every start is 0 (a fresh prompt, attention
        over this chunk only); span S: attention also reads earlier positions of each slot back from
        the cache, over its first S positions (S >= every start + real length). No host syncs: the
        service captures it per (prompts, tokens) shape (engine/prefill_graphs.py)."""
        self._require_runtime()
        num_rows, length, _ = embeds.shape
        cos_table, sin_table = self._rope
        if span is None:
            cos = cos_table[:length][None].expand(num_rows, length, -1)
            sin = sin_table[:length][None].expand(num_rows, length, -1)
            view = SlotChunkView(self.cache, slots, None, None)
            mask = causal_mask(0, length, self.device)
        else:
            # padding queries may run past the cache; clamped, they write the slot's last position,
            # after every real one (a prompt is shorter than max_seq_len), and nothing reads them
            offsets = torch.arange(length, device=self.device)
            positions = (starts[:, None] + offsets[None, :]).clamp(max=self.cache.max_seq_len - 1)  # [P, T]
            cos, sin = cos_table[positions], sin_table[positions]
            view = SlotChunkView(self.cache, slots, positions, span)
            keys = torch.arange(span, device=self.device)
            mask = (keys[None, None, :] <= positions[:, :, None])[:, None]                        # [P, 1, T, S]
        return self.model.run(embeds.to(self.dtype), cos, sin, view, mask)

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        """Codec-head logits (float32) of post-norm hidden states [..., H] -> [..., vocab]."""
        return self._head(hidden)

    def decode_step(self, input_embeds: torch.Tensor, slots: torch.Tensor,
                    positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """input_embeds [bs, H] at positions [bs] of slots [bs] (distinct) -> (hidden [bs, H], logits [bs, vocab]).

        Attention reads each row's keys 0..position straight from its slot (SlotDecodeView.attend),
        so one shape serves every context length (positions must be < the cache's max_seq_len).
        No host syncs: safe to capture in a CUDA graph with static input tensors.
        """
        self._require_runtime()
        cos_table, sin_table = self._rope
        cos = cos_table[positions][:, None]  # [bs, 1, D]
        sin = sin_table[positions][:, None]
        view = SlotDecodeView(self.cache, slots, positions)
        hidden = self.model.run(input_embeds.to(self.dtype)[:, None], cos, sin, view, None)[:, 0]
        return hidden, self._head(hidden)

    def predict_residuals(self, past_hidden: torch.Tensor, c0: torch.Tensor, sub: RowSampling, keys: torch.Tensor,
                          candidate_k: int | None = None, return_logits: bool = False):
        """past_hidden [bs, H] (post-norm talker hidden that produced c0), c0 [bs] -> codes [bs, 15]
        (and logits [bs, 15, 2048] with return_logits). keys [bs, 15]: the noise keys of groups
        1..15 (hash_noise.group_keys(seeds, steps, 1, 15))."""
        return self.code_predictor.forward_frame(past_hidden, self.embed_codec(c0), sub, keys,
                                                 candidate_k=candidate_k, return_logits=return_logits)


def build_empty(config: TalkerConfig, device: str | torch.device, dtype: torch.dtype) -> TalkerModel:
    """Uninitialised parameters on `device`: no CPU fp32 copy of a 2B-parameter model, no init cost."""
    with torch.device("meta"):
        model = TalkerModel(config)
    return model.to(dtype=dtype).to_empty(device=device).eval().requires_grad_(False)
