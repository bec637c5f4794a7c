"""Encoded voices by content: the same reference clip (same samples, rate, mode and transcript)
is encoded once (issue #14). Under load the same few clips recur (an app's default voices, one
user's many requests), and encoding costs far more than a talker step. Bounded LRU; loop thread
and worker thread both use it, so it locks."""
from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict

import numpy as np

from protos.tts.internal.v1 import talker_pb2


def voice_key(request: talker_pb2.EncodeVoice, audio: np.ndarray) -> bytes:
    """sha256 over everything that decides the prompt: samples, their rate, mode, transcript ids."""
    digest = hashlib.sha256()
    digest.update(np.ascontiguousarray(audio, dtype="<f4").tobytes())
    digest.update(f"|{request.sample_rate_hz}|{int(request.x_vector_only)}|".encode())
    digest.update(np.asarray(request.reference_text_token_ids, dtype="<i8").tobytes())
    return digest.digest()


class VoiceCache:
    def __init__(self, max_entries: int) -> None:
        if max_entries < 0:
            raise ValueError(f"max_entries must be >= 0 (0: no cache), got {max_entries}")
        self.max_entries = max_entries
        self._prompts: OrderedDict[bytes, talker_pb2.VoicePrompt] = OrderedDict()
        self._lock = threading.Lock()
        self.num_hits = 0
        self.num_misses = 0

    def get(self, key: bytes) -> talker_pb2.VoicePrompt | None:
        with self._lock:
            prompt = self._prompts.get(key)
            if prompt is None:
                self.num_misses += 1
                return None
            self._prompts.move_to_end(key)
            self.num_hits += 1
            out = talker_pb2.VoicePrompt()
            out.CopyFrom(prompt)   # callers may not change what the cache holds
            return out

    def put(self, key: bytes, prompt: talker_pb2.VoicePrompt) -> None:
        if self.max_entries == 0:
            return
        with self._lock:
            self._prompts[key] = prompt
            self._prompts.move_to_end(key)
            while len(self._prompts) > self.max_entries:
                self._prompts.popitem(last=False)

    def __len__(self) -> int:
        return len(self._prompts)
