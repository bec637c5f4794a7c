"""The e2e benchmark's workloads: one per way of choosing a voice (issue #14).

| workload        | model        | what each request carries                                    |
|-----------------|--------------|--------------------------------------------------------------|
| custom-voice    | CustomVoice  | a named speaker                                              |
| voice-design    | VoiceDesign  | a voice described in words                                   |
| registered      | Base         | a voice id registered once (in-context) before the level     |
| registered-xvector | Base      | a voice id registered once (speaker embedding only)          |
| clone-xvector   | Base         | the reference clip itself, speaker embedding only            |
| clone-icl       | Base         | the reference clip and its transcript (in-context cloning)   |

Clone workloads use one fixed synthetic clip (`synthetic_reference`: 5 s, 24 kHz, a voiced
harmonic tone with a syllable envelope and a little seeded noise) so runs compare. Every request
of a per-request clone workload sends the same clip: the talker's content-hash cache makes all but
the first encoding free, which is the point of the cache; `--distinct-clips` makes each stream's
clip differ (a gain step per seed) to measure encoding under load.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import soundfile

from client import TtsClient, make_config
from protos.tts.v1 import config_pb2

WORKLOADS = ("custom-voice", "voice-design", "registered", "registered-xvector", "clone-xvector", "clone-icl")
MODEL_TYPES = {"custom-voice": "custom_voice", "voice-design": "voice_design", "registered": "base",
               "registered-xvector": "base", "clone-xvector": "base", "clone-icl": "base"}
REFERENCE_TEXT = "This is the voice you should sound like, read at an easy pace."
DESIGN = "A calm, warm female voice, speaking slowly and clearly."
REFERENCE_S = 5.0
SAMPLE_RATE_HZ = 24000
REGISTERED_ID = "bench-voice"

ConfigFor = Callable[[int, int], config_pb2.SynthesisConfig]   # (seed, frames) -> config


def synthetic_reference(path: Path, seconds: float = REFERENCE_S, gain: float = 1.0) -> Path:
    """A fixed speech-like clip: 140 Hz harmonics under a 4 Hz syllable envelope, plus noise."""
    t = np.arange(int(seconds * SAMPLE_RATE_HZ)) / SAMPLE_RATE_HZ
    voiced = sum(np.sin(2 * np.pi * 140.0 * k * t) / k for k in range(1, 9))
    envelope = 0.5 * (1 - np.cos(2 * np.pi * 4.0 * t))
    noise = np.random.default_rng(0).normal(0.0, 0.02, t.shape)
    pcm = (0.25 * gain * voiced * envelope + noise).astype(np.float32)
    soundfile.write(str(path), np.clip(pcm, -1.0, 1.0), SAMPLE_RATE_HZ, subtype="PCM_16")
    return path


def _common(seed: int, frames: int, **voice) -> config_pb2.SynthesisConfig:
    return make_config(language="english", encoding=config_pb2.AUDIO_ENCODING_PCM16, seed=seed, max_frames=frames,
                       min_frames=frames, **voice)


async def prepare(client: TtsClient, workload: str, work_dir: Path, speaker: str = "vivian",
                  distinct_clips: bool = False, register: bool = True) -> ConfigFor:
    """What each stream of `workload` sends; registers the voice first where the workload needs one
    (unless `register` is False: another client of the same level did)."""
    if workload not in WORKLOADS:
        raise ValueError(f"unknown workload {workload!r}; one of {', '.join(WORKLOADS)}")
    if workload == "custom-voice":
        return lambda seed, frames: _common(seed, frames, voice=speaker)
    if workload == "voice-design":
        return lambda seed, frames: _common(seed, frames, voice=f"design:{DESIGN}")
    clip = synthetic_reference(work_dir / "reference.wav")
    if workload in ("registered", "registered-xvector"):
        # no transcript: the voice is its speaker embedding alone, a prompt as long as CustomVoice's
        transcript = REFERENCE_TEXT if workload == "registered" else ""
        if register:
            await client.register_voice(REGISTERED_ID, clip, transcript, overwrite=True)
        return lambda seed, frames: _common(seed, frames, voice=f"id:{REGISTERED_ID}")
    text = REFERENCE_TEXT if workload == "clone-icl" else ""

    def config_for(seed: int, frames: int) -> config_pb2.SynthesisConfig:
        path = clip
        if distinct_clips:   # a different clip per seed: no cache hit, every request is encoded
            path = synthetic_reference(work_dir / f"reference-{seed}.wav", gain=0.5 + (seed % 97) / 200)
        return _common(seed, frames, reference_audio=path, reference_text=text)
    return config_for
