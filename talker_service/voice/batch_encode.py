"""Many clone references encoded together: per group of clips, one log-mel, one speaker-encoder and
one codec-encoder forward, each clip's x-vector and codes those of the clip encoded alone.

Clips of any lengths share a forward: each is right-padded to the group's longest, and the mel
(`LogMelSpectrogram.forward_clips`), the speaker encoder (`ragged.py`) and the codec encoder
(`CodecEncoder.encode_batch`) keep every clip's frames to its own samples. What is left is the
rounding of batched kernels, which is not batch-invariant (oneDNN and cuDNN pick algorithms by
shape): on CPU, x-vectors of the tiny float32 encoder differed from the lone clip's by <= 3e-6
(values ~1.3), of a bf16 one by one bf16 step; the codes came out equal in every case tried.

The mel runs on the encoder's device in float32, batched: on the CPU one 5 s clip took 5 ms (a
2-core dev box), per clip and ahead of every request of the batch. On CUDA this moves the
x-vector off the reference's CPU mel by float32 rounding of the STFT, far inside what the bf16
encoder rounds away. Resampling stays on the CPU (soxr, as the
reference) and costs nothing for 24 kHz clips. A group is bounded by padded audio
(`max_batch_samples`: clips x longest), which bounds the codec's activations (64 channels per
24 kHz sample at full size); clips are sorted by length first, so little of it is padding.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from service_common.host_copy import to_host
from talker_service.voice.codec_encoder import CodecEncoder
from talker_service.voice.mel import LogMelSpectrogram
from talker_service.voice.reference_audio import ReferenceAudioLimits, resample_to_24k, validate_reference_audio
from talker_service.voice.shape_buckets import ShapeBuckets
from talker_service.voice.speaker_encoder import SpeakerEncoder

logger = logging.getLogger(__name__)


@dataclass
class ReferenceClip:
    audio: np.ndarray          # [num_samples] float32 at sample_rate_hz
    sample_rate_hz: int
    x_vector_only: bool        # False: the codes too (in-context cloning)


@dataclass
class EncodedReference:
    x_vector: torch.Tensor | None = None   # [enc_dim] float32 on CPU
    codes: torch.Tensor | None = None      # [K, 16] int64 on CPU; in-context clips only
    error: Exception | None = None         # this clip's own failure; ValueError: the clip is unusable


@dataclass
class BatchTimes:
    prepare_ms: float = 0.0    # CPU: checks and resampling
    mel_ms: float = 0.0        # clips to the device, log-mels
    speaker_ms: float = 0.0
    codec_ms: float = 0.0
    num_forwards: int = 0      # speaker and codec forwards, retries of a failed group one by one included


def forward_groups(num_samples: Sequence[int], max_batch_samples: int) -> list[list[int]]:
    """Indices grouped shortest first so that len(group) x its longest <= max_batch_samples (a clip
    longer than that goes alone)."""
    groups: list[list[int]] = []
    for index in sorted(range(len(num_samples)), key=lambda i: num_samples[i]):
        # sorted ascending: the clip being added is the group's longest
        if groups and (len(groups[-1]) + 1) * num_samples[index] <= max_batch_samples:
            groups[-1].append(index)
        else:
            groups.append([index])
    return groups


class ReferenceEncoder:
    def __init__(self, speaker_encoder: SpeakerEncoder, codec_encoder: CodecEncoder,
                 limits: ReferenceAudioLimits = ReferenceAudioLimits(), max_batch_samples: int = 80 * 24000,
                 buckets: ShapeBuckets | None = None) -> None:
        if max_batch_samples < 1:
            raise ValueError(f"max_batch_samples must be >= 1, got {max_batch_samples}")
        self.speaker_encoder = speaker_encoder
        self.codec_encoder = codec_encoder
        self.limits = limits
        self.max_batch_samples = max_batch_samples
        self.buckets = buckets            # None: each group runs at its own shape
        param = next(speaker_encoder.parameters())
        self.device, self.dtype = param.device, param.dtype
        self.mel = LogMelSpectrogram().to(self.device)   # float32 whatever the encoder's dtype

    @torch.inference_mode()
    def encode(self, clips: Sequence[ReferenceClip]) -> tuple[list[EncodedReference], BatchTimes]:
        results = [EncodedReference() for _ in clips]
        times = BatchTimes()
        lap_s = time.perf_counter()
        audio: dict[int, np.ndarray] = {}      # clip index -> 24 kHz samples, for clips that passed the checks
        for i, clip in enumerate(clips):
            try:
                audio[i] = resample_to_24k(validate_reference_audio(clip.audio, clip.sample_rate_hz, self.limits),
                                           clip.sample_rate_hz)
            except ValueError as exc:
                results[i].error = exc
        elapsed_ms, lap_s = _lap_ms(lap_s, self.device)
        times.prepare_ms += elapsed_ms
        on_device = {i: torch.from_numpy(np.ascontiguousarray(a)).to(self.device) for i, a in audio.items()}
        elapsed_ms, lap_s = _lap_ms(lap_s, self.device)
        times.mel_ms += elapsed_ms

        def x_vectors(rows: list[int]) -> list[torch.Tensor]:
            nonlocal lap_s
            x_vector = self._x_vectors(*self._bucketed([on_device[i] for i in rows]), times, lap_s)
            lap_s = time.perf_counter()
            return list(x_vector[:len(rows)])

        def codes(rows: list[int]) -> list[torch.Tensor]:
            nonlocal lap_s
            out = self.codec_encoder.encode_batch(*self._bucketed([on_device[i] for i in rows]))   # CPU codes
            elapsed_ms, lap_s = _lap_ms(lap_s, self.device)
            times.codec_ms += elapsed_ms
            return out[:len(rows)]

        passed = list(audio)
        for group in forward_groups([len(audio[i]) for i in passed], self.max_batch_samples):
            times.num_forwards += _run_group([passed[j] for j in group], x_vectors, results, "x_vector")
        in_context = [i for i in passed if not clips[i].x_vector_only and results[i].error is None]
        for group in forward_groups([len(audio[i]) for i in in_context], self.max_batch_samples):
            times.num_forwards += _run_group([in_context[j] for j in group], codes, results, "codes")
        return results, times


    def _x_vectors(self, clips: list[torch.Tensor], pad_to: int, times: BatchTimes, lap_s: float) -> torch.Tensor:
        mel, num_frames = self.mel.forward_clips(clips, pad_to)                           # [B, 128, frames] float32
        elapsed_ms, lap_s = _lap_ms(lap_s, self.device)
        times.mel_ms += elapsed_ms
        x_vector = torch.from_numpy(to_host(self.speaker_encoder(mel.to(self.dtype), num_frames).float()))  # [B, enc_dim]
        elapsed_ms, lap_s = _lap_ms(lap_s, self.device)
        times.speaker_ms += elapsed_ms
        return x_vector

    def _bucketed(self, clips: list[torch.Tensor]) -> tuple[list[torch.Tensor], int]:
        """(the group with silent clips added up to its clips bucket, samples to pad every row to);
        the silent rows' outputs are dropped."""
        if self.buckets is None:
            return clips, 0
        num_clips, num_samples = self.buckets.shape([clip.shape[0] for clip in clips])
        return list(clips) + [clips[0].new_zeros(num_samples)] * (num_clips - len(clips)), num_samples

    @torch.inference_mode()
    def warm_up(self, shapes: Sequence[tuple[int, int]], should_pause: Callable[[], bool] = lambda: False) -> int:
        """Run both encoders once at each (clips, samples) shape on silent clips, so no request
        meets a shape for the first time; returns the shapes done. Stops early (to serve requests
        first, then go on from where it stopped) when `should_pause()` says so."""
        done = 0
        for num_clips, num_samples in shapes:
            if should_pause():
                break
            clips = [torch.zeros(num_samples, device=self.device)] * num_clips
            self._x_vectors(clips, num_samples, BatchTimes(), time.perf_counter())
            self.codec_encoder.encode_batch(clips, num_samples)
            done += 1
        return done


def _run_group(group: list[int], forward: Callable[[list[int]], list[torch.Tensor]],
               results: list[EncodedReference], name: str) -> int:
    """One forward over the group; if it raises, each clip again alone, so a fault (a clip the
    encoder cannot take, memory for the whole group) fails only the clips it happens with.
    Returns the forwards run."""
    try:
        for i, value in zip(group, forward(group)):
            setattr(results[i], name, value)
        return 1
    except Exception as exc:   # noqa: BLE001 - every kind is retried alone and reported per clip
        if len(group) == 1:
            results[group[0]].error = exc
            return 1
        logger.warning("%s forward over %d clips failed (%s: %s); encoding them one by one", name, len(group),
                       type(exc).__name__, exc)
    for i in group:
        _run_group([i], forward, results, name)
    return 1 + len(group)


def _lap_ms(started_s: float, device: torch.device) -> tuple[float, float]:
    """ms since started_s, the device's work on this thread's stream included, and the new start."""
    if device.type == "cuda":
        torch.cuda.current_stream(device).synchronize()
    now_s = time.perf_counter()
    return (now_s - started_s) * 1e3, now_s
