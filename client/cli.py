"""`qwen3-tts-say "text" -o out.wav`: synthesize through a running gateway.

    qwen3-tts-say "Hello there." -o hello.wav                  # default voice of the served model
    qwen3-tts-say "Hello there." --voice ryan --stream-text --play
    qwen3-tts-say "Hi." --ref-audio me.wav --ref-text "what I said" -o clone.wav

--stream-text feeds the text word by word (as an LLM would) instead of all at once; progress
(time to first audio, audio received) goes to stderr.
"""
from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import sys
import time

import grpc
import numpy as np
import soundfile

from client.client import TtsClient, make_config
from protos.tts.v1 import config_pb2, voices_pb2


async def _default_voice(client: TtsClient, args) -> str:
    if args.voice or args.ref_audio or args.instruct:
        return args.voice
    models = (await client.list_voices()).models
    if models and models[0].model_type == voices_pb2.MODEL_TYPE_CUSTOM_VOICE and models[0].speakers:
        return models[0].speakers[0].name
    if models and models[0].model_type == voices_pb2.MODEL_TYPE_VOICE_DESIGN:
        return "design:"
    raise SystemExit("the served model clones voices: pass --ref-audio (and --ref-text) or --voice id:VOICE_ID")


async def _words(text: str, delay_s: float):
    parts = text.split(" ")
    for i, word in enumerate(parts):
        yield word + (" " if i < len(parts) - 1 else "")
        await asyncio.sleep(delay_s)


async def say(args) -> int:
    async with TtsClient(args.target) as client:
        voice = await _default_voice(client, args)
        cfg = make_config(voice, language=args.language, encoding=config_pb2.AUDIO_ENCODING_FLOAT32,
                          sample_rate_hz=args.sample_rate, speed=args.speed, seed=args.seed,
                          reference_audio=args.ref_audio, reference_text=args.ref_text, instruct=args.instruct)
        texts = _words(args.text, args.word_delay_s) if args.stream_text else [args.text]
        chunks: list[np.ndarray] = []
        rate = args.sample_rate or 24000
        t0 = time.monotonic()
        async for response in client.stream(texts, cfg, timeout_s=args.timeout_s):
            kind = response.WhichOneof("response")
            if kind == "start":
                rate = response.start.audio_format.sample_rate_hz
                print(f"request {response.start.request_id}: voice {response.start.voice.name or 'custom'}, "
                      f"seed {response.start.seed}", file=sys.stderr)
            elif kind == "audio":
                chunks.append(np.frombuffer(response.audio.audio, "<f4"))
                if not args.quiet:
                    got_s = sum(c.size for c in chunks) / rate
                    print(f"\r{got_s:6.2f} s audio after {time.monotonic() - t0:6.2f} s", end="", file=sys.stderr)
            elif kind == "summary":
                s = response.summary
                print(f"\ndone: {s.audio_s:.2f} s audio, TTFA {s.time_to_first_audio_ms:.0f} ms, "
                      f"RTF {s.real_time_factor:.3f}, {s.num_frames} frames", file=sys.stderr)
    pcm = np.concatenate(chunks) if chunks else np.zeros(0, np.float32)
    if args.output:
        soundfile.write(args.output, pcm, rate, subtype="PCM_16")
        print(f"wrote {args.output}", file=sys.stderr)
    if args.play:
        _play(pcm, rate)
    return 0


def _play(pcm: np.ndarray, rate: int) -> None:
    player = shutil.which("aplay") or shutil.which("ffplay")
    if player is None:
        print("--play: no aplay or ffplay found; use -o FILE instead", file=sys.stderr)
        return
    args = ([player, "-q", "-f", "FLOAT_LE", "-c", "1", "-r", str(rate)] if player.endswith("aplay")
            else [player, "-nodisp", "-autoexit", "-loglevel", "quiet", "-f", "f32le", "-ar", str(rate), "-i", "-"])
    subprocess.run(args, input=pcm.astype("<f4").tobytes(), check=False, timeout=max(pcm.size / rate * 2, 10))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="qwen3-tts-say", description="Synthesize speech through a Qwen3-TTS gateway.")
    p.add_argument("text")
    p.add_argument("-o", "--output", help="WAV file to write")
    p.add_argument("--target", default="127.0.0.1:50051", help="gateway host:port")
    p.add_argument("--voice", default="", help='speaker name, "design:DESCRIPTION" or "id:VOICE_ID"')
    p.add_argument("--instruct", default="", help="style instruction (speaker and design voices)")
    p.add_argument("--ref-audio", help="reference audio file to clone (Base models)")
    p.add_argument("--ref-text", default="", help="transcript of --ref-audio (empty: x-vector only)")
    p.add_argument("--language", default="auto")
    p.add_argument("--sample-rate", type=int, default=0, help="output Hz (0: 24000)")
    p.add_argument("--speed", type=float, default=0.0, help="0.5..2.0 (0: 1.0)")
    p.add_argument("--seed", type=int)
    p.add_argument("--stream-text", action="store_true", help="send the text word by word")
    p.add_argument("--word-delay-s", type=float, default=0.05, help="pause between words with --stream-text")
    p.add_argument("--play", action="store_true", help="play the audio (aplay or ffplay)")
    p.add_argument("--timeout-s", type=float, default=300.0)
    p.add_argument("--quiet", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not args.output and not args.play:
        build_parser().error("give -o FILE and/or --play")
    try:
        return asyncio.run(say(args))
    except grpc.aio.AioRpcError as exc:
        print(f"error: {exc.code().name}: {exc.details()}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
