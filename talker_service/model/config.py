"""Typed views of the official `config.json` (talker, code predictor, special ids).

Only the keys the math depends on are read; anything we do not implement (sliding windows,
non-default RoPE, other activations) is refused here with a CheckpointError naming the key,
instead of silently computing something else.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from checkpoint.errors import CheckpointError


def _require(config: dict, key: str, where: str) -> Any:
    if key not in config:
        raise CheckpointError(f"config.json: missing key {where}.{key}")
    return config[key]


@dataclass(frozen=True)
class DecoderStackConfig:
    """Fields shared by the talker backbone and the code predictor (both Qwen3-style stacks)."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    num_code_groups: int
    rms_norm_eps: float
    rope_theta: float
    attention_bias: bool

    @property
    def num_query_groups(self) -> int:
        """Query heads per KV head (GQA)."""
        return self.num_attention_heads // self.num_key_value_heads

    @staticmethod
    def _fields_from(config: dict, where: str) -> dict:
        hidden = int(_require(config, "hidden_size", where))
        heads = int(_require(config, "num_attention_heads", where))
        kv_heads = int(config.get("num_key_value_heads", heads))
        if heads % kv_heads != 0:
            raise CheckpointError(
                f"config.json: {where}.num_attention_heads={heads} is not a multiple of num_key_value_heads={kv_heads}"
            )
        act = config.get("hidden_act", "silu")
        if act != "silu":
            raise CheckpointError(f"config.json: {where}.hidden_act={act!r} is not supported (only 'silu')")
        if config.get("use_sliding_window", False):
            raise CheckpointError(f"config.json: {where}.use_sliding_window=true is not supported")
        layer_types = config.get("layer_types") or []
        if any(t != "full_attention" for t in layer_types):
            raise CheckpointError(f"config.json: {where}.layer_types={layer_types} (only full_attention is supported)")
        _check_rope(config.get("rope_scaling"), where)
        return dict(
            hidden_size=hidden,
            intermediate_size=int(_require(config, "intermediate_size", where)),
            num_hidden_layers=int(_require(config, "num_hidden_layers", where)),
            num_attention_heads=heads,
            num_key_value_heads=kv_heads,
            # 0.6B has head_dim 128 although hidden/heads = 64: the key is authoritative when present
            head_dim=int(config.get("head_dim") or hidden // heads),
            vocab_size=int(_require(config, "vocab_size", where)),
            num_code_groups=int(config.get("num_code_groups", 16)),
            rms_norm_eps=float(config.get("rms_norm_eps", 1e-6)),
            rope_theta=float(config.get("rope_theta", 10000.0)),
            attention_bias=bool(config.get("attention_bias", False)),
        )


def _check_rope(rope_scaling: dict | None, where: str) -> None:
    """Only the default (unscaled) RoPE is implemented. The talker's interleaved MRoPE is exactly
    1-D RoPE for TTS because the three position rows are always equal (facts §3.3)."""
    if rope_scaling is None:
        return
    rope_type = rope_scaling.get("rope_type", rope_scaling.get("type", "default"))
    if rope_type != "default":
        raise CheckpointError(f"config.json: {where}.rope_scaling.rope_type={rope_type!r} is not supported (only 'default')")


@dataclass(frozen=True)
class CodePredictorConfig(DecoderStackConfig):
    @classmethod
    def from_dict(cls, config: dict) -> "CodePredictorConfig":
        return cls(**cls._fields_from(config, "talker_config.code_predictor_config"))

    @property
    def num_residual_groups(self) -> int:
        """Codebooks predicted by this model (all but codebook 0)."""
        return self.num_code_groups - 1


@dataclass(frozen=True)
class TalkerConfig(DecoderStackConfig):
    text_vocab_size: int = 151936
    text_hidden_size: int = 2048
    code_predictor: CodePredictorConfig | None = None

    @classmethod
    def from_dict(cls, config: dict) -> "TalkerConfig":
        where = "talker_config"
        fields = cls._fields_from(config, where)
        predictor = CodePredictorConfig.from_dict(_require(config, "code_predictor_config", where))
        if predictor.num_code_groups != fields["num_code_groups"]:
            raise CheckpointError(
                f"config.json: talker num_code_groups={fields['num_code_groups']} but code predictor has "
                f"{predictor.num_code_groups}"
            )
        return cls(
            **fields,
            text_vocab_size=int(_require(config, "text_vocab_size", where)),
            text_hidden_size=int(_require(config, "text_hidden_size", where)),
            code_predictor=predictor,
        )


def _plain_int(value: Any) -> int:
    """Speaker ids are plain ints in the official JSON; some third-party copies wrap them in a list."""
    if isinstance(value, (list, tuple)) and len(value) == 1:
        value = value[0]
    return int(value)


@dataclass(frozen=True)
class ModelSpecialIds:
    """Text-side and codec-side special ids plus the language/speaker tables of one checkpoint."""

    tts_pad: int
    tts_bos: int
    tts_eos: int
    im_start: int
    im_end: int
    assistant: int
    codec_pad: int
    codec_bos: int
    codec_eos: int
    codec_think: int
    codec_nothink: int
    codec_think_bos: int
    codec_think_eos: int
    codec_vocab_size: int
    language_ids: dict[str, int] = field(default_factory=dict)
    speaker_ids: dict[str, int] = field(default_factory=dict)
    speaker_dialects: dict[str, str | bool] = field(default_factory=dict)

    @property
    def suppressed_range(self) -> tuple[int, int]:
        """[start, end) of codec ids never sampled for codebook 0 (EOS excepted): the top 1024 ids."""
        return self.codec_vocab_size - 1024, self.codec_vocab_size

    @classmethod
    def from_config(cls, config: dict) -> "ModelSpecialIds":
        talker = _require(config, "talker_config", "")
        t = "talker_config"
        return cls(
            tts_pad=int(_require(config, "tts_pad_token_id", "")),
            tts_bos=int(_require(config, "tts_bos_token_id", "")),
            tts_eos=int(_require(config, "tts_eos_token_id", "")),
            im_start=int(_require(config, "im_start_token_id", "")),
            im_end=int(_require(config, "im_end_token_id", "")),
            assistant=int(config.get("assistant_token_id", 77091)),
            codec_pad=int(_require(talker, "codec_pad_id", t)),
            codec_bos=int(_require(talker, "codec_bos_id", t)),
            codec_eos=int(_require(talker, "codec_eos_token_id", t)),
            codec_think=int(_require(talker, "codec_think_id", t)),
            codec_nothink=int(_require(talker, "codec_nothink_id", t)),
            codec_think_bos=int(_require(talker, "codec_think_bos_id", t)),
            codec_think_eos=int(_require(talker, "codec_think_eos_id", t)),
            codec_vocab_size=int(_require(talker, "vocab_size", t)),
            language_ids={k.lower(): int(v) for k, v in (talker.get("codec_language_id") or {}).items()},
            speaker_ids={k.lower(): _plain_int(v) for k, v in (talker.get("spk_id") or {}).items()},
            speaker_dialects={k.lower(): v for k, v in (talker.get("spk_is_dialect") or {}).items()},
        )
