"""Codes -> latent frames: the split residual VQ decoder (1 semantic + N-1 acoustic codebooks).

Checkpoint names: `rvq_{first,rest}.vq.layers.{i}._codebook.{embedding_sum,cluster_usage}` and
`rvq_{first,rest}.output_proj.weight` (1x1 conv, no bias). `rvq_{first,rest}.input_proj.weight`
exist in the file (the reference builds them with force_projection) and are held here so the
module maps 1:1 onto `decoder.*`, but only encoding would use them.

Both output projections are linear without bias, so projecting the sum of a group's lookups equals
summing projected lookups. `prepare()` therefore folds each codebook through its group's
projection once (fp32): decoding a frame becomes one gather of Q rows and a sum.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from vocoder_service.codec.precision import apply_keeping_fp32

USAGE_EPS = 1e-5  # the reference clamps cluster_usage from below before dividing


class _Codebook(nn.Module):
    def __init__(self, codebook_size: int, dim: int) -> None:
        super().__init__()
        self.cluster_usage = nn.Parameter(torch.ones(codebook_size))
        self.embedding_sum = nn.Parameter(torch.zeros(codebook_size, dim))

    def table(self) -> torch.Tensor:
        # [codebook_size, dim] in fp32
        usage = self.cluster_usage.float().clamp(min=USAGE_EPS)
        return self.embedding_sum.float() / usage[:, None]


class _CodebookLayer(nn.Module):
    def __init__(self, codebook_size: int, dim: int) -> None:
        super().__init__()
        self._codebook = _Codebook(codebook_size, dim)


class _CodebookGroup(nn.Module):
    def __init__(self, num_codebooks: int, codebook_size: int, dim: int, out_dim: int) -> None:
        super().__init__()
        self.input_proj = nn.Conv1d(out_dim, dim, 1, bias=False)  # unused by decoding
        self.vq = nn.Module()
        self.vq.layers = nn.ModuleList(_CodebookLayer(codebook_size, dim) for _ in range(num_codebooks))
        self.output_proj = nn.Conv1d(dim, out_dim, 1, bias=False)

    def projected_tables(self) -> torch.Tensor:
        # [num_codebooks, codebook_size, out_dim] fp32
        proj = self.output_proj.weight.float()[:, :, 0]  # [out_dim, dim]
        return torch.stack([layer._codebook.table() @ proj.T for layer in self.vq.layers])


class SplitQuantizer(nn.Module):
    _DERIVED = ("tables",)

    def __init__(self, num_quantizers: int, codebook_size: int, dim: int, out_dim: int) -> None:
        super().__init__()
        self.num_quantizers = num_quantizers
        self.codebook_size = codebook_size
        self.out_dim = out_dim
        self.rvq_first = _CodebookGroup(1, codebook_size, dim, out_dim)
        self.rvq_rest = _CodebookGroup(num_quantizers - 1, codebook_size, dim, out_dim)
        self.register_buffer("tables", torch.zeros(num_quantizers * codebook_size, out_dim), persistent=False)
        # Row offset of codebook q inside the flattened tables.
        self.register_buffer(
            "offsets", torch.arange(num_quantizers).view(1, num_quantizers, 1) * codebook_size, persistent=False
        )

    @torch.no_grad()
    def prepare(self) -> None:
        tables = torch.cat([self.rvq_first.projected_tables(), self.rvq_rest.projected_tables()])
        device = self.tables.device
        self.tables = tables.reshape(-1, self.out_dim).to(device)
        # Recomputed too: a meta-initialised model gets garbage buffers from `to_empty`.
        self.offsets = torch.arange(self.num_quantizers, device=device).view(1, -1, 1) * self.codebook_size

    def _apply(self, fn, recurse=True):
        return apply_keeping_fp32(self, super()._apply, fn, recurse, self._DERIVED)

    def forward(self, codes: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        # codes: [B, Q, T] int in [0, codebook_size) -> [B, out_dim, T] in `dtype`
        rows = F.embedding(codes.long() + self.offsets, self.tables)  # [B, Q, T, out_dim] fp32
        return rows.sum(dim=1).to(dtype).transpose(1, 2)
