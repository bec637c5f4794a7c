"""benchmarks/sim_gapless.py: the vocoder engine under a modelled talker on one shared GPU (fake clock)."""
from __future__ import annotations

from benchmarks.sim_gapless import Costs, parse_policy, simulate


def test_a_light_load_plays_without_gaps_and_an_overloaded_vocoder_stalls():
    light = simulate(8, 16, 25, parse_policy([]), Costs(), stagger_s=0.1)
    assert light["stall_over_50ms"] == 0 and light["late_chunks"] == 0
    # 16 streams of 2 s each: the closed loop of 8 ran them all, at the modelled speed
    assert 0 < light["audio_s_per_s"] and light["talker_mean_batch"] <= 8
    # a decoder 50x slower than the H200's cannot keep 8 listeners fed
    slow = simulate(8, 16, 25, parse_policy([]), Costs(vocoder_frame_ms=8.0, vocoder_row_frame_us=1200.0), stagger_s=0.1)
    assert slow["stall_over_50ms"] > 0 and slow["late_chunks"] > 0
    assert slow["audio_s_per_s"] < light["audio_s_per_s"]
