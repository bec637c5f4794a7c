"""Write a random Qwen3-TTS checkpoint in the exact official layout (module + CLI).

    python -m checkpoint.tiny --type custom_voice --out /tmp/tiny-cv [--seed 0] [--size tiny]

Same file names, config keys (checkpoint/configs.py) and tensor names/shapes
(checkpoint/layout.py) as the published repos; model.safetensors in bf16 like the official
talker weights, speech_tokenizer/model.safetensors in fp32 like the official codec (682 MB for
170.6 M parameters). Deterministic: the same (type, seed, size) gives byte-identical files.
`size="1b7"`/`"0b6"` writes full-size random weights (about 4 GB / 2 GB) for GPU benchmarks.
"""
from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

import torch

from checkpoint import layout
from checkpoint.configs import MODEL_SIZES, MODEL_TYPES, generation_config, model_config, speech_tokenizer_config
from checkpoint.safetensors_io import write_safetensors
from checkpoint.text_tokenizer import write_text_tokenizer
from checkpoint.tiny_init import init_tensor

logger = logging.getLogger(__name__)

MODEL_DTYPE = torch.bfloat16
SPEECH_TOKENIZER_DTYPE = torch.float32

# Read by AutoProcessor: which processor class wraps the text tokenizer.
PROCESSOR_CONFIG = {"processor_class": "Qwen3TTSProcessor"}
# speech_tokenizer/preprocessor_config.json: the codec's audio feature extractor.
SPEECH_FEATURE_EXTRACTOR_CONFIG = {
    "chunk_length_s": None, "feature_extractor_type": "EncodecFeatureExtractor", "feature_size": 1,
    "overlap": None, "padding_side": "right", "padding_value": 0.0, "return_attention_mask": True,
    "sampling_rate": 24000,
}


def speech_tokenizer_size(size: str) -> str:
    return "tiny" if size == "tiny" else "full"


def make_tiny_checkpoint(out_dir: str | Path, model_type: str, seed: int = 0, size: str = "tiny") -> Path:
    """Write a random checkpoint of `model_type` ("base"|"custom_voice"|"voice_design") into `out_dir`.

    `out_dir` must not exist or be empty. Returns it as a Path.
    """
    if model_type not in MODEL_TYPES:
        raise ValueError(f"unknown tts_model_type {model_type!r}; expected one of {MODEL_TYPES}")
    if size not in MODEL_SIZES:
        raise ValueError(f"unknown model size {size!r}; expected one of {MODEL_SIZES}")
    out_dir = Path(out_dir)
    if out_dir.exists() and any(out_dir.iterdir()):
        raise ValueError(f"output directory {out_dir} exists and is not empty")
    started_s = time.perf_counter()
    st_dir = out_dir / layout.SPEECH_TOKENIZER_DIR
    st_dir.mkdir(parents=True, exist_ok=True)

    config = model_config(model_type, size)
    _write_json(out_dir / layout.CONFIG_FILE, config)
    _write_json(out_dir / layout.GENERATION_CONFIG_FILE, generation_config())
    write_safetensors(
        out_dir / layout.WEIGHTS_FILE,
        layout.expected_tensor_shapes(config),
        MODEL_DTYPE,
        lambda name, shape: init_tensor(name, shape, seed),
    )
    write_text_tokenizer(out_dir)
    _write_json(out_dir / layout.PREPROCESSOR_CONFIG_FILE, PROCESSOR_CONFIG)

    st_config = speech_tokenizer_config(speech_tokenizer_size(size))
    layer_scale = st_config["decoder_config"]["layer_scale_initial_scale"]
    _write_json(st_dir / layout.CONFIG_FILE, st_config)
    write_safetensors(
        st_dir / layout.WEIGHTS_FILE,
        layout.expected_speech_tokenizer_shapes(st_config),
        SPEECH_TOKENIZER_DTYPE,
        lambda name, shape: init_tensor(name, shape, seed, layer_scale=layer_scale),
    )
    _write_json(st_dir / layout.PREPROCESSOR_CONFIG_FILE, SPEECH_FEATURE_EXTRACTOR_CONFIG)
    logger.info(
        "wrote random %s/%s checkpoint (seed %d) to %s in %.1f s",
        model_type, size, seed, out_dir, time.perf_counter() - started_s,
    )
    return out_dir


def _write_json(path: Path, value: dict) -> None:
    path.write_text(json.dumps(value, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write a random Qwen3-TTS 12 Hz checkpoint in the official layout.")
    parser.add_argument("--type", required=True, choices=MODEL_TYPES, help="tts_model_type")
    parser.add_argument("--out", required=True, type=Path, help="output directory (new or empty)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--size", default="tiny", choices=MODEL_SIZES, help="model size (default tiny)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        path = make_tiny_checkpoint(args.out, args.type, seed=args.seed, size=args.size)
    except ValueError as exc:
        parser.error(str(exc))
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
