"""The code predictor (MTP sub-talker): 15 residual codebooks from the talker's hidden state.

One frame: position 0 = projected talker hidden (post-norm), position 1 = projected talker codec
embedding of c0; `lm_head[j]` at the last position gives codebook j+1, whose embedding
`codec_embedding[j]` (talker width) is the next input. The cache restarts every frame, so it is
a small [layers, bs, kv, 16, head_dim] buffer per call and the 15 steps are unrolled with static
shapes: the whole frame is capturable in a CUDA graph.
"""
from __future__ import annotations

import os

import torch
from torch import nn

from talker_service.model.config import CodePredictorConfig
from talker_service.model.kv_cache import FrameKVCache
from talker_service.model.layers import DecoderStack, rope_tables
from kernels.hash_noise import token_hashes
from kernels.small_m_linear import linear
from talker_service.model.sampling import RowSampling, choose_tokens_and_rows, choose_tokens_keyed

QKV_TABLES_ENV = "QWEN3_TTS_QKV_TABLES"  # "0": layer 0 projects each step's input (A/B runs); else tables


def qkv_tables_wanted() -> bool:
    return os.environ.get(QKV_TABLES_ENV, "1") != "0"


class PredictorStack(DecoderStack):
    """`talker.code_predictor.model.*`: layers, norm and the 15 talker-width input embeddings."""

    def __init__(self, config: CodePredictorConfig, talker_hidden_size: int):
        super().__init__(config)
        self.codec_embedding = nn.ModuleList(
            nn.Embedding(config.vocab_size, talker_hidden_size) for _ in range(config.num_residual_groups)
        )


class CodePredictor(nn.Module):
    def __init__(self, config: CodePredictorConfig, talker_hidden_size: int):
        super().__init__()
        self.config = config
        self.model = PredictorStack(config, talker_hidden_size)
        self.lm_head = nn.ModuleList(
            nn.Linear(config.hidden_size, config.vocab_size, bias=False) for _ in range(config.num_residual_groups)
        )
        if config.hidden_size != talker_hidden_size:
            self.small_to_mtp_projection = nn.Linear(talker_hidden_size, config.hidden_size, bias=True)
        else:  # no tensors in the checkpoint (0.6B)
            self.small_to_mtp_projection = nn.Identity()
        self._rope: tuple[torch.Tensor, torch.Tensor] | None = None
        self._token_hashes: torch.Tensor | None = None
        self._positions: torch.Tensor | None = None   # arange(16): the frame cache's position table
        self._lengths: torch.Tensor | None = None     # arange(1, 17): its length table
        # codec_embedding[j] already through small_to_mtp_projection (init_runtime); None: identity
        self._projected_tables: list[torch.Tensor] | None = None
        # layer 0's folded q/k/v projection of every row of those tables (init_runtime); None: the GEMM
        self._qkv_tables: list[torch.Tensor] | None = None

    def init_runtime(self) -> None:
        """Build derived tables on the module's device/dtype (call after loading weights)."""
        weight = self.lm_head[0].weight
        self._rope = rope_tables(self.config.head_dim, self.config.rope_theta, self.config.num_code_groups,
                                 weight.dtype, weight.device)
        self._token_hashes = token_hashes(self.lm_head[0].weight.shape[0], weight.device)
        # every frame's constants, built here once instead of inside the (launch-bound) frame step:
        # the cache's position and length tables (the frame cache attends causally, no mask)
        cfg = self.config
        self._positions = torch.arange(cfg.num_code_groups, device=weight.device)
        self._lengths = self._positions + 1
        self.model.fuse_projections()
        # A step's next input is small_to_mtp_projection(codec_embedding[j](code)): a linear map of
        # one table row. Projecting each table once here turns that into a lookup: 14 GEMMs a frame
        # fewer (7.2 us each at batch 256 on the H200, a GEMV each at batch 1) for 4 MB per table
        # at 1.7B. The last table only feeds the talker's next frame (embed_frame), never a step
        # here, so it is not projected. With the identity projection (0.6B) the tables are read as
        # they are.
        if isinstance(self.small_to_mtp_projection, nn.Linear):
            with torch.no_grad():
                self._projected_tables = [self._project(table.weight)
                                          for table in self.model.codec_embedding[:cfg.num_residual_groups - 1]]
        # Steps 2..15 feed layer 0 one table row per batch row, and on the deferred-norm route layer 0
        # multiplies that raw row by its folded q/k/v weight (the 1/rms factor comes later, in the
        # attention launch). So the product is a table too: 14 more GEMMs a frame become lookups
        # (batch 256: a 256x4096x1024 GEMM, ~7 us, against a ~2.5 us gather), for 16 MB per table at
        # 1.7B (2048 codes x 4096 x bf16). QWEN3_TTS_QKV_TABLES=0 keeps the GEMM (A/B runs).
        self._qkv_tables = None   # the previous init's tables go before the new ones are made
        qkv_weight = self.model.qkv_weight(0)
        if qkv_weight is not None and qkv_tables_wanted():
            with torch.no_grad():
                self._qkv_tables = [linear(self._table_rows(j), qkv_weight)
                                    for j in range(cfg.num_residual_groups - 1)]

    def _project(self, x: torch.Tensor) -> torch.Tensor:
        """small_to_mtp_projection through kernels.small_m_linear (a batch-1 step's one-row GEMVs
        there, not cuBLAS's ~12 us bias GEMM); the identity where the widths match (0.6B)."""
        proj = self.small_to_mtp_projection
        return linear(x, proj.weight, proj.bias) if isinstance(proj, nn.Linear) else x

    def _table_rows(self, table: int) -> torch.Tensor:
        """Every step input table `table` can give, [vocab, Hp]: projected, or as stored (identity)."""
        if self._projected_tables is None:
            return self._project(self.model.codec_embedding[table].weight)
        return self._projected_tables[table]

    def _next_input(self, table: int, code: torch.Tensor) -> torch.Tensor:
        """codes [bs] of codebook table+1 -> the next step's input [bs, Hp]: the projected table's rows."""
        if self._projected_tables is None:
            return self._project(self.model.codec_embedding[table](code))
        return self._projected_tables[table][code]

    def forward_frame(self, past_hidden: torch.Tensor, c0_embeds: torch.Tensor, rows: RowSampling,
                      keys: torch.Tensor, candidate_k: int | None = None, return_logits: bool = False):
        """past_hidden, c0_embeds [bs, H_talker] -> codes int64 [bs, 15] (codebooks 1..15); keys
        [bs, 15] int64 are the rows' noise keys of groups 1..15 (computed once per frame by the caller).

        With return_logits also the raw logits float32 [bs, 15, vocab] that produced them.
        """
        if self._rope is None:
            self.init_runtime()
        cos_table, sin_table = self._rope
        cfg = self.config
        bs = past_hidden.shape[0]
        dtype = self.lm_head[0].weight.dtype
        cache = FrameKVCache(cfg.num_hidden_layers, bs, cfg.num_key_value_heads, cfg.num_code_groups, cfg.head_dim,
                             dtype, past_hidden.device, self._positions, self._lengths)
        x = self._project(torch.stack((past_hidden, c0_embeds), dim=1).to(dtype))  # [bs, 2, Hp]
        codes, all_logits = [], []
        first_qkv = None   # layer 0's q/k/v of x, looked up (steps 2..15, where the tables exist)
        for group in range(1, cfg.num_code_groups):
            start = 0 if group == 1 else group
            length = x.shape[1]
            cache.offset = start
            cos = cos_table[start:start + length].expand(bs, length, -1)
            sin = sin_table[start:start + length].expand(bs, length, -1)
            # x is this step's own fresh input (a projection or a table gather): the stack may keep its
            # residual stream in it rather than copy it (DecoderStack.run)
            hidden = self.model.run(x, cos, sin, cache, None, consume_input=True,
                                    first_qkv=first_qkv)[:, -1]  # [bs, Hp]: causal by position
            # [bs, vocab] in the model dtype: the sampler widens it itself (on the GPU inside its one
            # launch, where bf16 keys also halve the top-k bisection), so no float copy here
            logits = linear(hidden, self.lm_head[group - 1].weight)
            feeds_next = group < cfg.num_residual_groups
            if feeds_next and self._qkv_tables is not None:
                # codebook `group` is embedded by table group-1 and fed at position group+1: its rows of
                # the projected table and of layer 0's q/k/v table come with the pick (one launch)
                code, x, first_qkv = choose_tokens_and_rows(
                    logits, rows, keys[:, group - 1], (self._table_rows(group - 1), self._qkv_tables[group - 1]),
                    candidate_k, self._token_hashes)
                x, first_qkv = x[:, None], first_qkv[:, None]
            else:
                code = choose_tokens_keyed(logits, rows, keys[:, group - 1], candidate_k, self._token_hashes)
                if feeds_next:
                    x = self._next_input(group - 1, code)[:, None]
            codes.append(code)
            if return_logits:
                all_logits.append(logits.float())
        codes = torch.stack(codes, dim=1)
        return (codes, torch.stack(all_logits, dim=1)) if return_logits else codes
