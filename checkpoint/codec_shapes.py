"""Tensor names and shapes of `speech_tokenizer/model.safetensors`, from its config.json.

`encoder.*` is the HF MimiModel encoder half (SEANet, encoder transformer, downsample, split
RVQ); `decoder.*` is the official Code2Wav. Both mirror the official module trees (see
shared/QWEN3_TTS_FACTS.md §1.3) and are checked against the official classes by
tests/test_checkpoint_layout.py. Missing config keys take the official config classes' defaults.
"""
from __future__ import annotations

import math

from checkpoint.talker_shapes import with_defaults

Shapes = dict[str, tuple[int, ...]]

MIMI_DEFAULTS = {
    "sampling_rate": 24000, "audio_channels": 1, "hidden_size": 512, "num_filters": 64,
    "num_residual_layers": 1, "upsampling_ratios": [8, 6, 5, 4], "kernel_size": 7,
    "last_kernel_size": 3, "residual_kernel_size": 3, "dilation_growth_rate": 2, "compress": 2,
    "codebook_size": 2048, "codebook_dim": None, "num_quantizers": 32, "use_conv_shortcut": False,
    "vector_quantization_hidden_dimension": 256, "num_semantic_quantizers": 1,
    "num_hidden_layers": 8, "intermediate_size": 2048, "num_attention_heads": 8,
    "num_key_value_heads": 8, "head_dim": None, "attention_bias": False, "frame_rate": None,
}
CODE2WAV_DEFAULTS = {
    "codebook_size": 2048, "hidden_size": 1024, "latent_dim": 1024, "num_attention_heads": 16,
    "num_key_value_heads": 16, "head_dim": None, "attention_bias": False, "intermediate_size": 3072,
    "num_hidden_layers": 8, "num_quantizers": 16, "upsample_rates": [8, 5, 4, 3],
    "upsampling_ratios": [2, 2], "decoder_dim": 1536,
}


def mimi_encoder_shapes(encoder_config: dict, prefix: str = "encoder.") -> Shapes:
    """The Mimi encoder half: what the official model keeps of MimiModel."""
    c = with_defaults(encoder_config, MIMI_DEFAULTS)
    shapes: Shapes = {}

    def conv(name: str, c_out: int, c_in: int, kernel: int, bias: bool = True) -> None:
        shapes[f"{prefix}{name}.conv.weight"] = (c_out, c_in, kernel)
        if bias:
            shapes[f"{prefix}{name}.conv.bias"] = (c_out,)

    # SEANet: module index advances over ELUs too, hence the sparse layer numbers.
    index = 0
    conv(f"encoder.layers.{index}", c["num_filters"], c["audio_channels"], c["kernel_size"])
    index += 1
    scale = 1
    for ratio in reversed(c["upsampling_ratios"]):
        width = scale * c["num_filters"]
        for j in range(c["num_residual_layers"]):
            hidden = width // c["compress"]
            conv(f"encoder.layers.{index}.block.1", hidden, width, c["residual_kernel_size"])
            conv(f"encoder.layers.{index}.block.3", width, hidden, 1)
            if c["use_conv_shortcut"]:
                conv(f"encoder.layers.{index}.shortcut", width, width, 1)
            index += 1
        index += 1  # ELU
        conv(f"encoder.layers.{index}", width * 2, width, ratio * 2)
        index += 1
        scale *= 2
    index += 1  # ELU
    conv(f"encoder.layers.{index}", c["hidden_size"], scale * c["num_filters"], c["last_kernel_size"])

    hidden = c["hidden_size"]
    head_dim = c["head_dim"] or hidden // c["num_attention_heads"]
    for i in range(c["num_hidden_layers"]):
        p = f"{prefix}encoder_transformer.layers.{i}."
        for name, width in (("q_proj", c["num_attention_heads"]), ("k_proj", c["num_key_value_heads"]),
                            ("v_proj", c["num_key_value_heads"])):
            shapes[f"{p}self_attn.{name}.weight"] = (width * head_dim, hidden)
            if c["attention_bias"]:
                shapes[f"{p}self_attn.{name}.bias"] = (width * head_dim,)
        shapes[f"{p}self_attn.o_proj.weight"] = (hidden, c["num_attention_heads"] * head_dim)
        if c["attention_bias"]:
            shapes[f"{p}self_attn.o_proj.bias"] = (hidden,)
        shapes[f"{p}mlp.fc1.weight"] = (c["intermediate_size"], hidden)
        shapes[f"{p}mlp.fc2.weight"] = (hidden, c["intermediate_size"])
        for norm in ("input_layernorm", "post_attention_layernorm"):
            shapes[f"{p}{norm}.weight"] = (hidden,)
            shapes[f"{p}{norm}.bias"] = (hidden,)
        shapes[f"{p}self_attn_layer_scale.scale"] = (hidden,)
        shapes[f"{p}mlp_layer_scale.scale"] = (hidden,)

    hop_length = math.prod(c["upsampling_ratios"])
    encodec_frame_rate = math.ceil(c["sampling_rate"] / hop_length)
    frame_rate = c["frame_rate"] or c["sampling_rate"] / (hop_length * 2)
    if frame_rate != encodec_frame_rate:
        kernel = 2 * int(encodec_frame_rate / frame_rate)
        shapes[f"{prefix}downsample.conv.weight"] = (hidden, hidden, kernel)

    codebook_dim = c["codebook_dim"] or hidden
    vq_hidden = c["vector_quantization_hidden_dimension"]
    groups = (("semantic_residual_vector_quantizer", c["num_semantic_quantizers"]),
              ("acoustic_residual_vector_quantizer", c["num_quantizers"] - c["num_semantic_quantizers"]))
    for group, count in groups:
        p = f"{prefix}quantizer.{group}."
        for i in range(count):
            shapes[f"{p}layers.{i}.codebook.initialized"] = (1,)
            shapes[f"{p}layers.{i}.codebook.cluster_usage"] = (c["codebook_size"],)
            shapes[f"{p}layers.{i}.codebook.embed_sum"] = (c["codebook_size"], codebook_dim)
        if vq_hidden != hidden:
            shapes[f"{p}input_proj.weight"] = (vq_hidden, hidden, 1)
            shapes[f"{p}output_proj.weight"] = (hidden, vq_hidden, 1)
    return shapes


def code2wav_shapes(decoder_config: dict, prefix: str = "decoder.") -> Shapes:
    """The 12 Hz decoder: split RVQ, pre-conv, sliding-window transformer, upsamplers, conv decoder."""
    c = with_defaults(decoder_config, CODE2WAV_DEFAULTS)
    if "codebook_dim" not in c:
        raise ValueError("speech tokenizer decoder_config has no 'codebook_dim' (the official config carries it)")
    codebook_dim, latent, hidden = c["codebook_dim"], c["latent_dim"], c["hidden_size"]
    shapes: Shapes = {}

    half = codebook_dim // 2  # the quantizer works in half the codebook_dim
    for group, count in (("rvq_first", 1), ("rvq_rest", c["num_quantizers"] - 1)):
        p = f"{prefix}quantizer.{group}."
        shapes[f"{p}input_proj.weight"] = (half, codebook_dim, 1)
        shapes[f"{p}output_proj.weight"] = (codebook_dim, half, 1)
        for i in range(count):
            shapes[f"{p}vq.layers.{i}._codebook.cluster_usage"] = (c["codebook_size"],)
            shapes[f"{p}vq.layers.{i}._codebook.embedding_sum"] = (c["codebook_size"], half)

    shapes[f"{prefix}pre_conv.conv.weight"] = (latent, codebook_dim, 3)
    shapes[f"{prefix}pre_conv.conv.bias"] = (latent,)

    t = f"{prefix}pre_transformer."
    shapes[f"{t}input_proj.weight"] = (hidden, latent)
    shapes[f"{t}input_proj.bias"] = (hidden,)
    shapes[f"{t}output_proj.weight"] = (latent, hidden)
    shapes[f"{t}output_proj.bias"] = (latent,)
    shapes[f"{t}norm.weight"] = (hidden,)
    head_dim = c["head_dim"] or hidden // c["num_attention_heads"]
    q_width = c["num_attention_heads"] * head_dim
    kv_width = c["num_key_value_heads"] * head_dim
    for i in range(c["num_hidden_layers"]):
        p = f"{t}layers.{i}."
        for name, shape in (("q_proj", (q_width, hidden)), ("k_proj", (kv_width, hidden)),
                            ("v_proj", (kv_width, hidden)), ("o_proj", (hidden, q_width))):
            shapes[f"{p}self_attn.{name}.weight"] = shape
            if c["attention_bias"]:
                shapes[f"{p}self_attn.{name}.bias"] = (shape[0],)
        shapes[f"{p}mlp.gate_proj.weight"] = (c["intermediate_size"], hidden)
        shapes[f"{p}mlp.up_proj.weight"] = (c["intermediate_size"], hidden)
        shapes[f"{p}mlp.down_proj.weight"] = (hidden, c["intermediate_size"])
        shapes[f"{p}input_layernorm.weight"] = (hidden,)
        shapes[f"{p}post_attention_layernorm.weight"] = (hidden,)
        shapes[f"{p}self_attn_layer_scale.scale"] = (hidden,)
        shapes[f"{p}mlp_layer_scale.scale"] = (hidden,)

    for i, factor in enumerate(c["upsampling_ratios"]):
        p = f"{prefix}upsample.{i}."
        shapes[f"{p}0.conv.weight"] = (latent, latent, factor)  # ConvTranspose1d: [in, out, k]
        shapes[f"{p}0.conv.bias"] = (latent,)
        shapes[f"{p}1.dwconv.conv.weight"] = (latent, 1, 7)
        shapes[f"{p}1.dwconv.conv.bias"] = (latent,)
        shapes[f"{p}1.norm.weight"] = (latent,)
        shapes[f"{p}1.norm.bias"] = (latent,)
        shapes[f"{p}1.pwconv1.weight"] = (4 * latent, latent)
        shapes[f"{p}1.pwconv1.bias"] = (4 * latent,)
        shapes[f"{p}1.pwconv2.weight"] = (latent, 4 * latent)
        shapes[f"{p}1.pwconv2.bias"] = (latent,)
        shapes[f"{p}1.gamma"] = (latent,)

    d = f"{prefix}decoder."
    width = c["decoder_dim"]
    shapes[f"{d}0.conv.weight"] = (width, latent, 7)
    shapes[f"{d}0.conv.bias"] = (width,)
    for i, rate in enumerate(c["upsample_rates"], start=1):
        out = width // 2
        p = f"{d}{i}.block."
        shapes[f"{p}0.alpha"] = (width,)
        shapes[f"{p}0.beta"] = (width,)
        shapes[f"{p}1.conv.weight"] = (width, out, 2 * rate)  # ConvTranspose1d, stride = rate
        shapes[f"{p}1.conv.bias"] = (out,)
        for unit in (2, 3, 4):  # residual units with dilation 1, 3, 9
            for act in ("act1", "act2"):
                shapes[f"{p}{unit}.{act}.alpha"] = (out,)
                shapes[f"{p}{unit}.{act}.beta"] = (out,)
            shapes[f"{p}{unit}.conv1.conv.weight"] = (out, out, 7)
            shapes[f"{p}{unit}.conv1.conv.bias"] = (out,)
            shapes[f"{p}{unit}.conv2.conv.weight"] = (out, out, 1)
            shapes[f"{p}{unit}.conv2.conv.bias"] = (out,)
        width = out
    last = len(c["upsample_rates"]) + 1
    shapes[f"{d}{last}.alpha"] = (width,)
    shapes[f"{d}{last}.beta"] = (width,)
    shapes[f"{d}{last + 1}.conv.weight"] = (1, width, 7)
    shapes[f"{d}{last + 1}.conv.bias"] = (1,)
    return shapes
