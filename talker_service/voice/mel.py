"""Log-mel front end of the speaker encoder, with the official parameters.

The x-vector is only as good as this match: the speaker encoder was trained on exactly these
features (reflect pad by (n_fft - hop)/2 then a non-centred STFT, +1e-9 inside the magnitude sqrt,
slaney mel filters up to 12 kHz, natural log floored at 1e-5). The filterbank comes from librosa,
as in the reference; the STFT is torch's.
"""
from __future__ import annotations

import logging

import torch
import torch.nn.functional as F

logger = logging.getLogger(__name__)

SPEAKER_SAMPLE_RATE_HZ = 24000
N_FFT = 1024
WIN_LENGTH = 1024
HOP_LENGTH = 256
NUM_MELS = 128
FMIN_HZ = 0
FMAX_HZ = 12000
_MAGNITUDE_EPS = 1e-9
_LOG_FLOOR = 1e-5


def mel_filterbank(sample_rate_hz: int = SPEAKER_SAMPLE_RATE_HZ, num_mels: int = NUM_MELS) -> torch.Tensor:
    """Slaney-normalised mel filters [num_mels, n_fft/2 + 1] (float32)."""
    import librosa  # imported here: only the cloning path needs librosa

    filters = librosa.filters.mel(sr=sample_rate_hz, n_fft=N_FFT, n_mels=num_mels, fmin=FMIN_HZ, fmax=FMAX_HZ)
    return torch.from_numpy(filters).float()


class LogMelSpectrogram(torch.nn.Module):
    """audio [B, N] at 24 kHz (float) -> log-mel [B, num_mels, N // 256] (float32)."""

    def __init__(self, num_mels: int = NUM_MELS) -> None:
        super().__init__()
        # derived, never loaded: non-persistent so checkpoints need not carry them
        self.register_buffer("filters", mel_filterbank(num_mels=num_mels), persistent=False)
        self.register_buffer("window", torch.hann_window(WIN_LENGTH), persistent=False)

    @property
    def min_num_samples(self) -> int:
        # reflect padding needs more input samples than the pad width
        return (N_FFT - HOP_LENGTH) // 2 + 1

    def forward(self, audio: torch.Tensor) -> torch.Tensor:
        if audio.dim() != 2:
            raise ValueError(f"audio must be [batch, samples], got shape {tuple(audio.shape)}")
        self._check_length(audio.shape[1])
        return self._log_mel(_reflect_pad(audio.float()))

    def forward_clips(self, clips: list[torch.Tensor], pad_to: int = 0) -> tuple[torch.Tensor, list[int]]:
        """Clips [N_i] of any lengths -> (log-mel [B, num_mels, max frames], frames of each clip).

        Each clip is reflect-padded at its own ends before the batch is right-padded with zeros (to
        the longest clip, or to `pad_to` samples when that is longer: a fixed shape), and
        frame t reads padded samples [256 t, 256 t + 1024): for t < N_i // 256 that lies inside clip
        i's own padded samples, so its frames are the ones `forward` gives the clip alone; frames
        past them are padding (see ragged.py for how the speaker encoder ignores them).
        """
        for clip in clips:
            if clip.dim() != 1:
                raise ValueError(f"each clip must be [samples], got shape {tuple(clip.shape)}")
            self._check_length(clip.shape[0])
        padded = [_reflect_pad(clip.float().unsqueeze(0))[0] for clip in clips]
        batch = torch.nn.utils.rnn.pad_sequence(padded, batch_first=True)                 # [B, max N + 768]
        extra = pad_to + (padded[0].shape[0] - clips[0].shape[0]) - batch.shape[1]   # pad_to: a fixed shape
        if extra > 0:
            batch = torch.nn.functional.pad(batch, (0, extra))
        return self._log_mel(batch), [clip.shape[0] // HOP_LENGTH for clip in clips]

    def _check_length(self, num_samples: int) -> None:
        if num_samples < self.min_num_samples:
            raise ValueError(f"audio has {num_samples} samples; the mel front end needs at least {self.min_num_samples}")

    def _log_mel(self, padded: torch.Tensor) -> torch.Tensor:
        spec = torch.stft(
            padded, N_FFT, hop_length=HOP_LENGTH, win_length=WIN_LENGTH, window=self.window,
            center=False, normalized=False, onesided=True, return_complex=True,
        )                                                                            # [B, 513, frames]
        magnitude = torch.sqrt(torch.view_as_real(spec).pow(2).sum(-1) + _MAGNITUDE_EPS)
        mel = torch.matmul(self.filters, magnitude)                                  # [B, num_mels, frames]
        return torch.log(torch.clamp(mel, min=_LOG_FLOOR))


def _reflect_pad(audio: torch.Tensor) -> torch.Tensor:
    """[B, N] -> [B, N + 768]: the reference's (n_fft - hop) / 2 reflection at both ends."""
    pad = (N_FFT - HOP_LENGTH) // 2
    return F.pad(audio.unsqueeze(1), (pad, pad), mode="reflect").squeeze(1)
