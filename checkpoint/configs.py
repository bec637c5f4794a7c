"""Config dicts in the exact official `config.json` layouts, for full-size and tiny models.

Full-size values are the published ones (see shared/QWEN3_TTS_FACTS.md §2); they drive the GPU
benchmarks with random weights. Tiny values keep every structural constant that code depends on
(special ids, 16 code groups, 2048-entry codebooks, the 1920x upsampling, the 72-frame window,
text vocabulary 151936 so Qwen special tokens keep their ids) and shrink only widths and depths.
"""
from __future__ import annotations

import copy

MODEL_TYPES = ("base", "custom_voice", "voice_design")
MODEL_SIZES = ("1b7", "0b6", "tiny")

LANGUAGE_IDS = {
    "chinese": 2055, "english": 2050, "german": 2053, "italian": 2070, "portuguese": 2071,
    "spanish": 2054, "japanese": 2058, "korean": 2064, "french": 2061, "russian": 2069,
}
DIALECT_LANGUAGE_IDS = {"beijing_dialect": 2074, "sichuan_dialect": 2062}
SPEAKER_IDS = {
    "serena": 3066, "vivian": 3065, "uncle_fu": 3010, "ryan": 3061, "aiden": 2861,
    "ono_anna": 2873, "sohee": 2864, "eric": 2875, "dylan": 2878,
}
SPEAKER_DIALECTS = {name: False for name in SPEAKER_IDS} | {"eric": "sichuan_dialect", "dylan": "beijing_dialect"}

GENERATION_CONFIG = {
    "do_sample": True, "temperature": 0.9, "top_k": 50, "top_p": 1.0, "repetition_penalty": 1.05,
    "subtalker_dosample": True, "subtalker_temperature": 0.9, "subtalker_top_k": 50,
    "subtalker_top_p": 1.0, "max_new_tokens": 8192,
}

# (talker hidden, talker intermediate, talker layers, heads, kv heads, head_dim, text hidden,
#  predictor hidden, predictor intermediate, predictor layers, predictor heads, predictor kv heads, predictor head_dim)
_SIZES = {
    "1b7": dict(h=2048, i=6144, l=28, nh=16, nkv=8, hd=128, th=2048, ph=1024, pi=3072, pl=5, pnh=16, pnkv=8, phd=128),
    "0b6": dict(h=1024, i=3072, l=28, nh=16, nkv=8, hd=128, th=2048, ph=1024, pi=3072, pl=5, pnh=16, pnkv=8, phd=128),
    # talker width != predictor width so small_to_mtp_projection exists, as at 1.7B
    "tiny": dict(h=48, i=96, l=2, nh=4, nkv=2, hd=16, th=32, ph=32, pi=64, pl=2, pnh=4, pnkv=2, phd=16),
}


# What the official checkpoints' config.json carries (Qwen3-TTS-12Hz-1.7B-CustomVoice's, as mirrored).
OFFICIAL_TRANSFORMERS_VERSION = "4.57.3"


def model_config(model_type: str, size: str = "tiny") -> dict:
    """The top-level `config.json` dict for a model of `model_type` and `size`."""
    if model_type not in MODEL_TYPES:
        raise ValueError(f"unknown tts_model_type {model_type!r}; expected one of {MODEL_TYPES}")
    if size not in MODEL_SIZES:
        raise ValueError(f"unknown model size {size!r}; expected one of {MODEL_SIZES}")
    s = _SIZES[size]
    languages = dict(LANGUAGE_IDS)
    speakers: dict = {}
    dialects: dict = {}
    if model_type == "custom_voice":
        languages |= DIALECT_LANGUAGE_IDS
        speakers = dict(SPEAKER_IDS)
        dialects = dict(SPEAKER_DIALECTS)
    predictor = {
        "vocab_size": 2048, "hidden_size": s["ph"], "intermediate_size": s["pi"],
        "num_hidden_layers": s["pl"], "num_attention_heads": s["pnh"], "num_key_value_heads": s["pnkv"],
        "head_dim": s["phd"], "hidden_act": "silu", "max_position_embeddings": 65536,
        "rms_norm_eps": 1e-6, "rope_theta": 1000000, "rope_scaling": None, "attention_bias": False,
        "use_sliding_window": False, "sliding_window": None, "num_code_groups": 16,
        "attention_dropout": 0.0, "initializer_range": 0.02, "use_cache": True,
        "tie_word_embeddings": False, "max_window_layers": 28,
        "layer_types": ["full_attention"] * s["pl"],
    }
    talker = {
        "code_predictor_config": predictor,
        "vocab_size": 3072, "hidden_size": s["h"], "intermediate_size": s["i"],
        "num_hidden_layers": s["l"], "num_attention_heads": s["nh"], "num_key_value_heads": s["nkv"],
        "head_dim": s["hd"], "hidden_act": "silu", "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-6, "rope_theta": 1000000,
        "rope_scaling": {"interleaved": True, "mrope_section": [24, 20, 20] if s["hd"] == 128 else _mrope(s["hd"]), "rope_type": "default"},
        "attention_bias": False, "use_sliding_window": False, "sliding_window": None,
        "attention_dropout": 0.0, "initializer_range": 0.02, "use_cache": True, "tie_word_embeddings": False,
        "num_code_groups": 16, "text_hidden_size": s["th"], "text_vocab_size": 151936,
        "position_id_per_seconds": 13,
        "codec_eos_token_id": 2150, "codec_think_id": 2154, "codec_nothink_id": 2155,
        "codec_think_bos_id": 2156, "codec_think_eos_id": 2157, "codec_pad_id": 2148, "codec_bos_id": 2149,
        "codec_language_id": languages, "spk_id": speakers, "spk_is_dialect": dialects,
    }
    config = {
        "architectures": ["Qwen3TTSForConditionalGeneration"],
        "model_type": "qwen3_tts",
        "tokenizer_type": "qwen3_tts_tokenizer_12hz",
        "tts_model_size": "0b6" if size == "0b6" else "1b7",
        "tts_model_type": model_type,
        "im_start_token_id": 151644, "im_end_token_id": 151645, "assistant_token_id": 77091,
        "tts_pad_token_id": 151671, "tts_bos_token_id": 151672, "tts_eos_token_id": 151673,
        "talker_config": talker,
    }
    if model_type == "base":
        config["speaker_encoder_config"] = speaker_encoder_config(size)
    # The official config.json files name the version they were saved with. Transformers 5 reads it
    # to pick the text tokenizer's split regex (gateway/split_regex.py), so the tiny files carry it too.
    config["transformers_version"] = OFFICIAL_TRANSFORMERS_VERSION
    return config


def _mrope(head_dim: int) -> list[int]:
    """An mrope split summing to head_dim/2 (the 3 sections share one position stream for TTS)."""
    half = head_dim // 2
    a = half - 2 * (half // 3)
    return [a, half // 3, half // 3]


def speaker_encoder_config(size: str = "tiny") -> dict:
    if size == "tiny":
        return {
            "mel_dim": 128, "enc_dim": _SIZES["tiny"]["h"], "enc_channels": [16, 16, 16, 16, 48],
            "enc_kernel_sizes": [5, 3, 3, 3, 1], "enc_dilations": [1, 2, 3, 4, 1],
            "enc_attention_channels": 8, "enc_res2net_scale": 8, "enc_se_channels": 8, "sample_rate": 24000,
        }
    return {
        "mel_dim": 128, "enc_dim": _SIZES[size]["h"], "enc_channels": [512, 512, 512, 512, 1536],
        "enc_kernel_sizes": [5, 3, 3, 3, 1], "enc_dilations": [1, 2, 3, 4, 1],
        "enc_attention_channels": 128, "enc_res2net_scale": 8, "enc_se_channels": 128, "sample_rate": 24000,
    }


def generation_config() -> dict:
    return copy.deepcopy(GENERATION_CONFIG)


def speech_tokenizer_config(size: str = "full") -> dict:
    """`speech_tokenizer/config.json` (Qwen3TTSTokenizerV2Config layout)."""
    tiny = size == "tiny"
    decoder = {
        "codebook_size": 2048, "codebook_dim": 16 if tiny else 512,
        "latent_dim": 32 if tiny else 1024, "decoder_dim": 48 if tiny else 1536,
        "hidden_size": 16 if tiny else 512, "intermediate_size": 32 if tiny else 1024,
        "num_hidden_layers": 2 if tiny else 8,
        "num_attention_heads": 2 if tiny else 16, "num_key_value_heads": 2 if tiny else 16,
        "head_dim": 8 if tiny else 64,
        "hidden_act": "silu", "rms_norm_eps": 1e-5, "rope_theta": 10000, "max_position_embeddings": 8000,
        "sliding_window": 72, "layer_scale_initial_scale": 0.01, "num_quantizers": 16,
        "num_semantic_quantizers": 1, "semantic_codebook_size": 4096,
        "vector_quantization_hidden_dimension": 16 if tiny else 512,
        "upsample_rates": [8, 5, 4, 3], "upsampling_ratios": [2, 2],
        "attention_bias": False, "attention_dropout": 0.0,
    }
    encoder = {
        "audio_channels": 1, "num_filters": 4 if tiny else 64, "kernel_size": 7, "residual_kernel_size": 3,
        "last_kernel_size": 3, "num_residual_layers": 1, "dilation_growth_rate": 2, "compress": 2,
        "upsampling_ratios": [8, 6, 5, 4], "hidden_size": 16 if tiny else 512,
        "num_hidden_layers": 2 if tiny else 8, "num_attention_heads": 2 if tiny else 8,
        "num_key_value_heads": 2 if tiny else 8, "head_dim": 8 if tiny else 64,
        "intermediate_size": 32 if tiny else 2048, "hidden_act": "gelu", "norm_eps": 1e-5,
        "layer_scale_initial_scale": 0.01, "rope_theta": 10000, "max_position_embeddings": 8000,
        "sliding_window": 250, "num_quantizers": 32, "num_semantic_quantizers": 1,
        "codebook_size": 2048, "codebook_dim": 8 if tiny else 256,
        "vector_quantization_hidden_dimension": 8 if tiny else 256,
        "pad_mode": "constant", "use_causal_conv": True, "sampling_rate": 24000,
        "frame_rate": 12.5, "use_conv_shortcut": False, "trim_right_ratio": 1.0,
        "upsample_groups": 512 if not tiny else 16, "normalize": False,
    }
    return {
        "architectures": ["Qwen3TTSTokenizerV2Model"],
        "model_type": "qwen3_tts_tokenizer_12hz",
        "encoder_valid_num_quantizers": 16,
        "input_sample_rate": 24000, "output_sample_rate": 24000,
        "encode_downsample_rate": 1920, "decode_upsample_rate": 1920,
        "encoder_config": encoder,
        "decoder_config": decoder,
    }
