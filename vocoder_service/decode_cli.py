"""`qwen3-tts-decode`: decode a codes file ([T, 16] ints, .npy or .json) to a 24 kHz mono WAV.

    qwen3-tts-decode --model tiny --codes examples/codes_demo.json --out demo.wav

`--stream-chunk-frames N` decodes through the streaming decoder in N-frame steps instead of one
offline forward; the WAV is the same (the streaming path is exact).
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

import numpy as np
import torch

logger = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def read_codes(path: str | Path, num_quantizers: int = 16) -> torch.Tensor:
    """Codes file -> int64 tensor [1, num_quantizers, T]; ValueError naming what is wrong."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"codes file not found: {path}")
    if path.suffix == ".npy":
        array = np.load(path, allow_pickle=False)
    elif path.suffix == ".json":
        try:
            array = np.asarray(json.loads(path.read_text()))
        except (json.JSONDecodeError, ValueError) as exc:
            raise ValueError(f"{path}: not a JSON array of [T, {num_quantizers}] integers ({exc})") from exc
    else:
        raise ValueError(f"{path}: expected a .npy or .json codes file")
    if array.ndim != 2 or array.shape[1] != num_quantizers:
        raise ValueError(f"{path}: codes must have shape [T, {num_quantizers}], got {list(array.shape)}")
    if array.shape[0] == 0:
        raise ValueError(f"{path}: codes file has 0 frames")
    if not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"{path}: codes must be integers, got dtype {array.dtype}")
    return torch.from_numpy(array.astype(np.int64).T.copy()).unsqueeze(0)


def resolve_model(name: str) -> Path:
    from checkpoint.files import resolve_model_dir

    return resolve_model_dir(name)


def decode_codes(model, codes: torch.Tensor, stream_chunk_frames: int | None) -> torch.Tensor:
    """codes [1, Q, T] -> pcm [T * samples_per_frame] float32 on CPU."""
    if not stream_chunk_frames:
        return model.decode(codes)[0].float().cpu()
    from vocoder_service.codec.streaming import StreamingDecoder

    decoder = StreamingDecoder(model, max_slots=1)
    pieces = []
    for start in range(0, codes.shape[2], stream_chunk_frames):
        chunk = codes[:, :, start : start + stream_chunk_frames]
        pieces.append(decoder.step(chunk, [0])[0].float().cpu())
    return torch.cat(pieces)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="qwen3-tts-decode", description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="tiny | tiny-base | ... | local dir | hub id")
    parser.add_argument("--codes", required=True, help="[T, 16] integer codes, .npy or .json")
    parser.add_argument("--out", required=True, help="output WAV path")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    parser.add_argument("--stream-chunk-frames", type=int, default=None, help="decode in N-frame streaming steps")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    import soundfile as sf

    from checkpoint.errors import CheckpointError
    from vocoder_service.codec.model import Code2Wav

    if args.stream_chunk_frames is not None and args.stream_chunk_frames < 1:
        print("error: --stream-chunk-frames must be >= 1", file=sys.stderr)
        return 2
    try:
        model = Code2Wav.from_pretrained(resolve_model(args.model), device=args.device, dtype=DTYPES[args.dtype])
        codes = read_codes(args.codes, model.config.num_quantizers)
        start_s = time.perf_counter()
        pcm = decode_codes(model, codes, args.stream_chunk_frames)
        wall_s = time.perf_counter() - start_s
    except (CheckpointError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    sf.write(str(out), pcm.numpy(), model.sample_rate_hz, subtype="PCM_16")
    audio_s = pcm.shape[0] / model.sample_rate_hz
    print(
        f"wrote {out}: {codes.shape[2]} frames, {audio_s:.2f} s of audio at {model.sample_rate_hz} Hz, "
        f"decoded in {wall_s:.2f} s (RTF {wall_s / audio_s:.3f})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
