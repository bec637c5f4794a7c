"""The decoder's pre-transformer: sliding-window causal attention with RoPE and layer scale.

Window W (72) includes the current frame: query at position p sees keys at p-W+1 .. p. Positions
are absolute frame indices of the stream (0.. for offline decode, as in the reference's single
forward), so RoPE angles are identical whether a sequence is decoded whole or in chunks.
Streaming keeps the post-RoPE K/V of the last W-1 frames per slot and layer.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from kernels.rmsnorm import rms_norm
from kernels.silu_mul import silu_mul
from vocoder_service.codec.config import DecoderConfig
from vocoder_service.codec.derived_weights import ConcatLinear
from vocoder_service.codec.precision import apply_keeping_fp32
from vocoder_service.codec.stream_state import StepState

_ACTIVATIONS = {"silu": F.silu, "gelu": F.gelu}


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalise in fp32, scale in the input dtype: the reference's rounding points, which the
        # kernel dispatcher keeps (one launch on CUDA instead of six).
        return rms_norm(x, self.weight, self.eps)


class LayerScale(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * x


class Mlp(nn.Module):
    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)
        self.act = _ACTIVATIONS[config.hidden_act]
        self.is_silu = config.hidden_act == "silu"
        self._gate_up = ConcatLinear()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # gate and up in one GEMM; silu(gate) * up in one kernel (same two roundings as eager)
        gate_up = self._gate_up(x, [self.gate_proj, self.up_proj])
        if self.is_silu:
            return self.down_proj(silu_mul(gate_up))
        gate, up = gate_up.chunk(2, dim=-1)
        return self.down_proj(self.act(gate) * up)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


class Attention(nn.Module):
    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = config.head_dim
        self.context_len = config.kv_context_frames
        bias = config.attention_bias
        self.q_proj = nn.Linear(config.hidden_size, self.num_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(config.hidden_size, self.num_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(config.hidden_size, self.num_kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, config.hidden_size, bias=bias)
        self.state_key = ""
        self._qkv = ConcatLinear()

    def state_specs(self) -> dict[str, tuple[int, ...]]:
        # K heads then V heads in one pool: one read, one cat and one write per step instead of two
        return {self.state_key + ".kv": (2 * self.num_kv_heads, self.context_len, self.head_dim)}

    def forward(self, x, cos, sin, mask, state: StepState | None = None) -> torch.Tensor:
        # x: [B, t, hidden]; cos/sin: [B|1, t, head_dim]; mask: [B|1, 1, t, S] bool (True = attend)
        bsz, num_new, _ = x.shape
        heads, kv_heads = self.num_heads, self.num_kv_heads
        qkv = self._qkv(x, [self.q_proj, self.k_proj, self.v_proj])
        qkv = qkv.view(bsz, num_new, heads + 2 * kv_heads, self.head_dim).transpose(1, 2)  # [B, heads, t, D]
        qk, v = qkv[:, : heads + kv_heads], qkv[:, heads + kv_heads :]
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        qk = qk * cos + _rotate_half(qk) * sin  # RoPE on q and k heads together
        q, k = qk[:, :heads], qk[:, heads:]
        if state is not None:
            # K/V of the previous W-1 frames, then this chunk: [B, 2 * kv_heads, W-1+t, head_dim]
            kv = torch.cat([state.context(self.state_key + ".kv"), torch.cat([k, v], dim=1)], dim=2)
            state.advance(self.state_key + ".kv", kv, 1, dim=2)
            k, v = kv[:, :kv_heads], kv[:, kv_heads:]
        if self.num_kv_heads != self.num_heads:
            repeats = self.num_heads // self.num_kv_heads
            k = k.repeat_interleave(repeats, dim=1)
            v = v.repeat_interleave(repeats, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.head_dim**-0.5)
        return self.o_proj(out.transpose(1, 2).reshape(bsz, num_new, -1))


class TransformerLayer(nn.Module):
    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.self_attn = Attention(config)
        self.mlp = Mlp(config)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn_layer_scale = LayerScale(config.hidden_size)
        self.mlp_layer_scale = LayerScale(config.hidden_size)

    def forward(self, x, cos, sin, mask, state: StepState | None = None) -> torch.Tensor:
        x = x + self.self_attn_layer_scale(self.self_attn(self.input_layernorm(x), cos, sin, mask, state))
        return x + self.mlp_layer_scale(self.mlp(self.post_attention_layernorm(x)))


class PreTransformer(nn.Module):
    _DERIVED = ("inv_freq",)

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.config = config
        self.input_proj = nn.Linear(config.latent_dim, config.hidden_size)
        self.layers = nn.ModuleList(TransformerLayer(config) for _ in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.output_proj = nn.Linear(config.hidden_size, config.latent_dim)
        self.register_buffer("inv_freq", torch.zeros(config.head_dim // 2), persistent=False)
        self.prepare()

    @torch.no_grad()
    def prepare(self) -> None:
        dim = self.config.head_dim
        exponents = torch.arange(0, dim, 2, dtype=torch.int64, device=self.inv_freq.device).float() / dim
        self.inv_freq = 1.0 / (self.config.rope_theta**exponents)

    def _apply(self, fn, recurse=True):
        return apply_keeping_fp32(self, super()._apply, fn, recurse, self._DERIVED)

    def forward(self, x: torch.Tensor, state: StepState | None = None) -> torch.Tensor:
        # x: [B, t, latent] -> [B, t, latent]
        num_new = x.shape[1]
        new = torch.arange(num_new, device=x.device)
        if state is None:
            query_pos = new.view(1, -1)  # [1, t]
            key_pos = query_pos
        else:
            query_pos = state.positions.view(-1, 1) + new  # [B, t]
            past = torch.arange(-self.config.kv_context_frames, num_new, device=x.device)
            key_pos = state.positions.view(-1, 1) + past  # [B, W-1+t]; negative = never existed
        diff = query_pos.unsqueeze(-1) - key_pos.unsqueeze(-2)  # [B|1, t, S]
        mask = ((diff >= 0) & (diff < self.config.sliding_window) & (key_pos.unsqueeze(-2) >= 0)).unsqueeze(1)
        angles = query_pos.unsqueeze(-1).float() * self.inv_freq  # [B|1, t, head_dim/2] fp32
        angles = torch.cat([angles, angles], dim=-1)
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        h = self.input_proj(x)
        for layer in self.layers:
            h = layer(h, cos, sin, mask, state)
        return self.output_proj(self.norm(h))
