"""The e2e benchmark's workloads (issue #14): each sends the voice it names, clone clips are fixed."""
from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.e2e_workloads import (MODEL_TYPES, REFERENCE_S, REFERENCE_TEXT, REGISTERED_ID,  # noqa: E402
                                      WORKLOADS, prepare, synthetic_reference)


class RecordingClient:
    def __init__(self) -> None:
        self.registered = []

    async def register_voice(self, voice_id, reference_audio, reference_text="", overwrite=False, **_):
        self.registered.append((voice_id, Path(reference_audio).read_bytes(), reference_text, overwrite))


def configs(workload: str, tmp_path: Path, **kw):
    client = RecordingClient()
    config_for = asyncio.run(prepare(client, workload, tmp_path, **kw))
    return client, config_for(7, 40), config_for(8, 40)


def test_every_workload_names_its_voice_and_a_fixed_length(tmp_path):
    assert set(MODEL_TYPES) == set(WORKLOADS)
    kinds = {}
    for workload in WORKLOADS:
        work = tmp_path / workload
        work.mkdir()
        client, first, second = configs(workload, work)
        assert first.sampling.max_frames == first.sampling.min_frames == 40 and first.sampling.seed == 7
        kinds[workload] = first.WhichOneof("voice")
        if workload.startswith("registered"):   # in-context with the transcript, x-vector without
            transcript = REFERENCE_TEXT if workload == "registered" else ""
            assert first.registered_voice_id == REGISTERED_ID and client.registered[0][2] == transcript
        if workload.startswith("clone"):
            assert first.clone.reference_audio.data == second.clone.reference_audio.data   # one clip
            assert first.clone.x_vector_only == (workload == "clone-xvector")
            assert first.clone.reference_text == ("" if workload == "clone-xvector" else REFERENCE_TEXT)
    assert kinds == {"custom-voice": "speaker", "voice-design": "design", "registered": "registered_voice_id",
                     "registered-xvector": "registered_voice_id", "clone-xvector": "clone", "clone-icl": "clone"}


def test_the_reference_clip_is_fixed_and_distinct_clips_differ(tmp_path):
    a = synthetic_reference(tmp_path / "a.wav")
    b = synthetic_reference(tmp_path / "b.wav")
    assert a.read_bytes() == b.read_bytes()
    pcm, rate = soundfile.read(str(a))
    assert rate == 24000 and len(pcm) == int(REFERENCE_S * rate) and 0.05 < np.abs(pcm).max() <= 1.0
    _, first, second = configs("clone-icl", tmp_path, distinct_clips=True)
    assert first.clone.reference_audio.data != second.clone.reference_audio.data
    with pytest.raises(ValueError, match="unknown workload"):
        asyncio.run(prepare(RecordingClient(), "nope", tmp_path))
