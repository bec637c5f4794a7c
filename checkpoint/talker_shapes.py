"""Tensor names and shapes of `model.safetensors` (talker.* and speaker_encoder.*), from config.json.

Mirrors the module tree the official `Qwen3TTSForConditionalGeneration` builds (see
shared/QWEN3_TTS_FACTS.md §1.3); tests/test_checkpoint_layout.py checks it against the official
classes' state_dict for every model type and size. Missing config keys take the official
config classes' defaults.
"""
from __future__ import annotations

Shapes = dict[str, tuple[int, ...]]

# Defaults of the official config classes for keys a config.json may omit.
TALKER_DEFAULTS = {
    "vocab_size": 3072, "hidden_size": 1024, "intermediate_size": 2048, "num_hidden_layers": 20,
    "num_attention_heads": 16, "num_key_value_heads": 2, "attention_bias": False,
    "num_code_groups": 32, "text_hidden_size": 2048, "text_vocab_size": 151936,
}
PREDICTOR_DEFAULTS = {
    "vocab_size": 2048, "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 5,
    "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, "attention_bias": False,
    "num_code_groups": 32,
}
SPEAKER_ENCODER_DEFAULTS = {
    "mel_dim": 128, "enc_dim": 1024, "enc_channels": [512, 512, 512, 512, 1536],
    "enc_kernel_sizes": [5, 3, 3, 3, 1], "enc_dilations": [1, 2, 3, 4, 1],
    "enc_attention_channels": 128, "enc_res2net_scale": 8, "enc_se_channels": 128,
}


def with_defaults(config: dict | None, defaults: dict) -> dict:
    """`config` over the official class `defaults`; a null value in the file means "default"."""
    return {**defaults, **{k: v for k, v in (config or {}).items() if v is not None}}


def decoder_stack_shapes(prefix: str, c: dict) -> Shapes:
    """Qwen3-style decoder layers (q/k norm, SwiGLU MLP, RMSNorms) plus the final norm."""
    hidden = c["hidden_size"]
    head_dim = c.get("head_dim") or hidden // c["num_attention_heads"]
    q_width = c["num_attention_heads"] * head_dim
    kv_width = c["num_key_value_heads"] * head_dim
    inter = c["intermediate_size"]
    shapes: Shapes = {}
    for i in range(c["num_hidden_layers"]):
        p = f"{prefix}layers.{i}."
        projections = {"q_proj": (q_width, hidden), "k_proj": (kv_width, hidden),
                       "v_proj": (kv_width, hidden), "o_proj": (hidden, q_width)}
        for name, shape in projections.items():
            shapes[f"{p}self_attn.{name}.weight"] = shape
            if c.get("attention_bias"):
                shapes[f"{p}self_attn.{name}.bias"] = (shape[0],)
        shapes[f"{p}self_attn.q_norm.weight"] = (head_dim,)
        shapes[f"{p}self_attn.k_norm.weight"] = (head_dim,)
        shapes[f"{p}mlp.gate_proj.weight"] = (inter, hidden)
        shapes[f"{p}mlp.up_proj.weight"] = (inter, hidden)
        shapes[f"{p}mlp.down_proj.weight"] = (hidden, inter)
        shapes[f"{p}input_layernorm.weight"] = (hidden,)
        shapes[f"{p}post_attention_layernorm.weight"] = (hidden,)
    shapes[f"{prefix}norm.weight"] = (hidden,)
    return shapes


def talker_shapes(talker_config: dict) -> Shapes:
    """Every `talker.*` tensor."""
    t = with_defaults(talker_config, TALKER_DEFAULTS)
    p = with_defaults(t.get("code_predictor_config"), PREDICTOR_DEFAULTS)
    hidden, text_hidden = t["hidden_size"], t["text_hidden_size"]
    shapes = decoder_stack_shapes("talker.model.", t)
    shapes["talker.model.codec_embedding.weight"] = (t["vocab_size"], hidden)
    shapes["talker.model.text_embedding.weight"] = (t["text_vocab_size"], text_hidden)
    shapes["talker.text_projection.linear_fc1.weight"] = (text_hidden, text_hidden)
    shapes["talker.text_projection.linear_fc1.bias"] = (text_hidden,)
    shapes["talker.text_projection.linear_fc2.weight"] = (hidden, text_hidden)
    shapes["talker.text_projection.linear_fc2.bias"] = (hidden,)
    shapes["talker.codec_head.weight"] = (t["vocab_size"], hidden)

    shapes.update(decoder_stack_shapes("talker.code_predictor.model.", p))
    # One table/head per residual codebook (1..G-1); the tables are talker-width because
    # they embed the predictor's outputs for the talker's next input.
    for i in range(p["num_code_groups"] - 1):
        shapes[f"talker.code_predictor.model.codec_embedding.{i}.weight"] = (p["vocab_size"], hidden)
        shapes[f"talker.code_predictor.lm_head.{i}.weight"] = (p["vocab_size"], p["hidden_size"])
    if p["hidden_size"] != hidden:  # otherwise the projection is an identity with no tensors
        shapes["talker.code_predictor.small_to_mtp_projection.weight"] = (p["hidden_size"], hidden)
        shapes["talker.code_predictor.small_to_mtp_projection.bias"] = (p["hidden_size"],)
    return shapes


def speaker_encoder_shapes(speaker_encoder_config: dict | None) -> Shapes:
    """Every `speaker_encoder.*` tensor (ECAPA-TDNN; every conv has a bias)."""
    s = with_defaults(speaker_encoder_config, SPEAKER_ENCODER_DEFAULTS)
    channels, kernels = s["enc_channels"], s["enc_kernel_sizes"]
    scale, se = s["enc_res2net_scale"], s["enc_se_channels"]
    shapes: Shapes = {}

    def conv(name: str, c_out: int, c_in: int, kernel: int) -> None:
        shapes[f"speaker_encoder.{name}.weight"] = (c_out, c_in, kernel)
        shapes[f"speaker_encoder.{name}.bias"] = (c_out,)

    conv("blocks.0.conv", channels[0], s["mel_dim"], kernels[0])
    for i in range(1, len(channels) - 1):
        c = channels[i]
        conv(f"blocks.{i}.tdnn1.conv", c, channels[i - 1], 1)
        for j in range(scale - 1):
            conv(f"blocks.{i}.res2net_block.blocks.{j}.conv", c // scale, c // scale, kernels[i])
        conv(f"blocks.{i}.tdnn2.conv", c, c, 1)
        conv(f"blocks.{i}.se_block.conv1", se, c, 1)
        conv(f"blocks.{i}.se_block.conv2", c, se, 1)
    last = channels[-1]
    # mfa's input is the concatenation of the SE-Res2Net outputs; the official module sizes it
    # from enc_channels[-1], which the published configs keep equal to that sum.
    conv("mfa.conv", last, last, kernels[-1])
    conv("asp.tdnn.conv", s["enc_attention_channels"], last * 3, 1)
    conv("asp.conv", last, s["enc_attention_channels"], 1)
    conv("fc", s["enc_dim"], last * 2, 1)
    return shapes
