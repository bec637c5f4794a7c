"""Synthesize one utterance to a WAV file, without the services.

    python -m talker_service.generate_cli --model tiny-custom-voice --text "Hello." \
        --speaker vivian --language english --out out.wav [--greedy] [--seed N] [--streaming-text]
    python -m talker_service.generate_cli --model tiny-voice-design --text "..." --instruct "A calm voice." --out o.wav
    python -m talker_service.generate_cli --model tiny-base --text "..." --ref-audio ref.wav \
        --ref-text "transcript of ref.wav" --out o.wav [--x-vector-only] [--save-voice voice.safetensors]
"""
from __future__ import annotations

import argparse
import logging
import sys
import time

import numpy as np
import torch

from talker_service.generate import SAMPLE_RATE_HZ, SynthesisRequest, Synthesizer

logger = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m talker_service.generate_cli", description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True,
                   help="checkpoint directory, hub id, or tiny-base / tiny-custom-voice / tiny-voice-design")
    p.add_argument("--text", required=True)
    p.add_argument("--out", required=True, help="output WAV path (24 kHz mono float)")
    p.add_argument("--language", default="auto")
    p.add_argument("--speaker", help="CustomVoice speaker name")
    p.add_argument("--instruct", help="VoiceDesign voice description or 1.7B CustomVoice style instruction")
    p.add_argument("--ref-audio", help="Base: reference audio file to clone")
    p.add_argument("--ref-text", help="Base: transcript of --ref-audio (in-context cloning)")
    p.add_argument("--x-vector-only", action="store_true", help="Base: clone from the speaker embedding only")
    p.add_argument("--voice-prompt", help="Base: a saved voice prompt (instead of --ref-audio)")
    p.add_argument("--save-voice", help="Base: also save the voice prompt built from --ref-audio here")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--streaming-text", dest="non_streaming_mode", action="store_const", const=False,
                      help="dual-track text feeding (one text token per frame)")
    mode.add_argument("--non-streaming-text", dest="non_streaming_mode", action="store_const", const=True,
                      help="all text in the prefill (default for CustomVoice and VoiceDesign)")
    p.add_argument("--greedy", action="store_true", help="argmax for the talker and the code predictor")
    p.add_argument("--seed", type=int, help="sampling seed (default: random, printed)")
    p.add_argument("--max-new-tokens", type=int, help="default: generation_config.json")
    p.add_argument("--max-seq-len", type=int, default=4096, help="talker context (prompt + frames)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", choices=sorted(DTYPES), help="default: bfloat16 on GPU, float32 on CPU")
    p.add_argument("--codes-out", help="also save the generated codes [n, 16] as .npy")
    p.add_argument("-v", "--verbose", action="store_true")
    return p.parse_args(argv)


def load_voice(synth: Synthesizer, args: argparse.Namespace):
    if args.voice_prompt:
        from talker_service.voice.clone_prompt import VoiceClonePrompt
        return VoiceClonePrompt.load(args.voice_prompt, hidden_size=synth.talker.config.hidden_size)
    if args.ref_audio:
        import soundfile as sf
        audio, sample_rate_hz = sf.read(args.ref_audio, dtype="float32", always_2d=True)
        voice = synth.clone_voice(audio.mean(axis=1), int(sample_rate_hz), args.ref_text,
                                  x_vector_only=args.x_vector_only)
        if args.save_voice:
            voice.save(args.save_voice)
        return voice
    return args.speaker


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(levelname)s %(name)s: %(message)s")
    on_gpu = str(args.device).startswith("cuda")
    dtype = DTYPES[args.dtype] if args.dtype else (torch.bfloat16 if on_gpu else torch.float32)
    try:
        synth = Synthesizer.from_pretrained(args.model, device=args.device, dtype=dtype, max_slots=1,
                                            max_seq_len=args.max_seq_len)
        overrides = dict(seed=args.seed, max_new_tokens=args.max_new_tokens)
        if args.greedy:
            overrides.update(do_sample=False, subtalker_dosample=False)
        sampling = synth.sampling_params(**overrides)
        voice = load_voice(synth, args)
        request = SynthesisRequest(text=args.text, voice=voice, language=args.language, instruct=args.instruct,
                                   sampling=sampling, non_streaming_mode=args.non_streaming_mode)
        started_s = time.perf_counter()
        result = synth.generate([request])[0]
        generated_s = time.perf_counter() - started_s
        pcm = synth.decode(result.codes, voice)
    except ValueError as exc:   # bad input (CheckpointError is a ValueError too): message, no traceback
        print(f"error: {exc}", file=sys.stderr)
        return 2
    import soundfile as sf
    sf.write(args.out, pcm, SAMPLE_RATE_HZ, subtype="FLOAT")
    if args.codes_out:
        np.save(args.codes_out, result.codes.numpy())
    audio_s = pcm.shape[0] / SAMPLE_RATE_HZ
    print(f"wrote {args.out}: {result.codes.shape[0]} frames, {audio_s:.2f} s audio, finish={result.finish_reason}, "
          f"seed={sampling.seed}, generate {generated_s:.2f} s (RTF {generated_s / max(audio_s, 1e-9):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
