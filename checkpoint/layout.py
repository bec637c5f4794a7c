"""Official Hugging Face file layout of a Qwen3-TTS 12 Hz checkpoint, and its tensor shapes.

    <root>/config.json                  model_type qwen3_tts, talker_config, ...
    <root>/generation_config.json       sampling defaults
    <root>/model.safetensors            talker.* (+ speaker_encoder.* for Base), bf16
           (or model.safetensors.index.json + shards)
    <root>/vocab.json, merges.txt, tokenizer_config.json   Qwen2 BPE text tokenizer
    <root>/preprocessor_config.json     processor config (no math in it)
    <root>/speech_tokenizer/config.json, model.safetensors, preprocessor_config.json
"""
from __future__ import annotations

from checkpoint.codec_shapes import code2wav_shapes, mimi_encoder_shapes
from checkpoint.talker_shapes import speaker_encoder_shapes, talker_shapes

CONFIG_FILE = "config.json"
GENERATION_CONFIG_FILE = "generation_config.json"
WEIGHTS_FILE = "model.safetensors"
WEIGHTS_INDEX_FILE = "model.safetensors.index.json"
TEXT_TOKENIZER_FILES = ("vocab.json", "merges.txt", "tokenizer_config.json")
PREPROCESSOR_CONFIG_FILE = "preprocessor_config.json"
SPEECH_TOKENIZER_DIR = "speech_tokenizer"
# Relative to SPEECH_TOKENIZER_DIR.
SPEECH_TOKENIZER_FILES = (CONFIG_FILE, WEIGHTS_FILE, PREPROCESSOR_CONFIG_FILE)

MODEL_TYPE = "qwen3_tts"
TOKENIZER_TYPE_12HZ = "qwen3_tts_tokenizer_12hz"

# Every file a loader needs, relative to the root. The weights may instead be sharded.
REQUIRED_FILES = (
    CONFIG_FILE,
    GENERATION_CONFIG_FILE,
    WEIGHTS_FILE,
    *TEXT_TOKENIZER_FILES,
    PREPROCESSOR_CONFIG_FILE,
    *(f"{SPEECH_TOKENIZER_DIR}/{name}" for name in SPEECH_TOKENIZER_FILES),
)


def expected_tensor_shapes(config: dict) -> dict[str, tuple[int, ...]]:
    """name -> shape of every tensor in `model.safetensors` for this `config.json` dict."""
    if "talker_config" not in config:
        raise ValueError("config has no 'talker_config'")
    shapes = talker_shapes(config["talker_config"])
    if config.get("tts_model_type") == "base":  # only Base clones voices from audio
        shapes.update(speaker_encoder_shapes(config.get("speaker_encoder_config")))
    return shapes


def expected_speech_tokenizer_shapes(st_config: dict) -> dict[str, tuple[int, ...]]:
    """name -> shape of every tensor in `speech_tokenizer/model.safetensors`."""
    for key in ("encoder_config", "decoder_config"):
        if key not in st_config:
            raise ValueError(f"speech tokenizer config has no {key!r}")
    shapes = mimi_encoder_shapes(st_config["encoder_config"], prefix="encoder.")
    shapes.update(code2wav_shapes(st_config["decoder_config"], prefix="decoder."))
    return shapes
