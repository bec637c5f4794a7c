"""Decoder (Code2Wav) settings read from `speech_tokenizer/config.json` -> `decoder_config`.

Defaults equal the official config class defaults, so a JSON that omits a key means the same
thing to us as to the reference loader. `codebook_dim` has no default there either.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

from checkpoint.errors import CheckpointError

SUPPORTED_ACTIVATIONS = ("silu", "gelu")


@dataclass(frozen=True)
class DecoderConfig:
    codebook_dim: int
    codebook_size: int = 2048
    hidden_size: int = 1024
    latent_dim: int = 1024
    rope_theta: float = 10000.0
    num_attention_heads: int = 16
    num_key_value_heads: int = 16
    head_dim: int = 0  # 0 -> hidden_size // num_attention_heads, as the reference falls back
    attention_bias: bool = False
    sliding_window: int = 72
    intermediate_size: int = 3072
    hidden_act: str = "silu"
    rms_norm_eps: float = 1e-5
    num_hidden_layers: int = 8
    num_quantizers: int = 16
    num_semantic_quantizers: int = 1
    upsample_rates: tuple[int, ...] = (8, 5, 4, 3)
    upsampling_ratios: tuple[int, ...] = (2, 2)
    decoder_dim: int = 1536

    @classmethod
    def from_dict(cls, raw: dict) -> "DecoderConfig":
        """Build from the official `decoder_config` dict; unknown keys are ignored."""
        if not isinstance(raw, dict):
            raise CheckpointError(f"decoder_config must be a JSON object, got {type(raw).__name__}")
        if "codebook_dim" not in raw:
            raise CheckpointError("decoder_config is missing required key 'codebook_dim'")
        names = {f.name for f in fields(cls)}
        values = {k: v for k, v in raw.items() if k in names and v is not None}
        values.update(_rope_theta(raw))
        for key in ("upsample_rates", "upsampling_ratios"):
            if key in values:
                values[key] = tuple(int(v) for v in values[key])
        config = cls(**values)
        if config.head_dim == 0:
            config = replace(config, head_dim=config.hidden_size // config.num_attention_heads)
        config.validate()
        return config

    def validate(self) -> None:
        problems = []
        if self.codebook_dim % 2:
            problems.append(f"codebook_dim must be even (the quantizer works in codebook_dim/2), got {self.codebook_dim}")
        if self.num_semantic_quantizers != 1:
            # The reference hard-codes one semantic codebook whatever the JSON says.
            problems.append(f"num_semantic_quantizers must be 1, got {self.num_semantic_quantizers}")
        if self.num_quantizers < 2:
            problems.append(f"num_quantizers must be >= 2, got {self.num_quantizers}")
        if self.num_attention_heads % self.num_key_value_heads:
            problems.append(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"num_key_value_heads ({self.num_key_value_heads})"
            )
        if self.decoder_dim % (2 ** len(self.upsample_rates)):
            problems.append(f"decoder_dim {self.decoder_dim} must halve {len(self.upsample_rates)} times")
        if self.hidden_act not in SUPPORTED_ACTIVATIONS:
            problems.append(f"hidden_act {self.hidden_act!r} is not one of {SUPPORTED_ACTIVATIONS}")
        if self.sliding_window < 1:
            problems.append(f"sliding_window must be >= 1, got {self.sliding_window}")
        if problems:
            raise CheckpointError("invalid decoder_config: " + "; ".join(problems))

    @property
    def quantizer_dim(self) -> int:
        """Width of each codebook entry (the reference's `codebook_dim // 2`)."""
        return self.codebook_dim // 2

    @property
    def samples_per_frame(self) -> int:
        """Output samples per code frame (1920 for the 12 Hz checkpoints)."""
        return math.prod(self.upsampling_ratios) * math.prod(self.upsample_rates)

    @property
    def output_channels(self) -> int:
        """Channels entering the final SnakeBeta and output conv."""
        return self.decoder_dim // 2 ** len(self.upsample_rates)

    @property
    def kv_context_frames(self) -> int:
        """Past frames each query sees besides itself: the window includes the current frame."""
        return self.sliding_window - 1


def _rope_theta(raw: dict) -> dict:
    """Transformers 5 may write theta under `rope_parameters`; only the default RoPE exists here."""
    params = raw.get("rope_parameters") or raw.get("rope_scaling") or {}
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type != "default":
        raise CheckpointError(f"decoder_config uses RoPE type {rope_type!r}; only 'default' is supported")
    if "rope_theta" in raw and raw["rope_theta"] is not None:
        return {"rope_theta": float(raw["rope_theta"])}
    if "rope_theta" in params:
        return {"rope_theta": float(params["rope_theta"])}
    return {}
