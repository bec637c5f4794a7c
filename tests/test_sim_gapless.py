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


def test_open_loop_arrivals_wait_for_a_vocoder_slot_and_gathering_batches_their_prefills():
    from talker_service.engine.prefill_gather import PrefillGather

    # 40 arrivals at 40/s, ~5 streams open on average: with 4 vocoder slots the talker starts an
    # arrival only when one is free (an open beyond them would raise RESOURCE_EXHAUSTED in the engine
    # and end the run), so arrivals queue longer than with room to spare
    roomy = simulate(8, 40, 25, parse_policy([]), Costs(), stagger_s=0.0, max_slots=64, rate_hz=40.0)
    tight = simulate(8, 40, 25, parse_policy([]), Costs(), stagger_s=0.0, max_slots=4, rate_hz=40.0)
    assert tight["queue_p95_ms"] > roomy["queue_p95_ms"] and tight["stall_over_50ms"] == 0
    spread = simulate(8, 40, 25, parse_policy([]), Costs(), stagger_s=0.0, max_slots=8, rate_hz=40.0)
    assert spread["stall_over_50ms"] == 0 and spread["num_prefills"] > 1
    # gathering: while a stream decodes, arrivals wait for a batch of 4 (or 200 ms): fewer prefills
    gathered = simulate(8, 40, 25, parse_policy([]), Costs(), stagger_s=0.0, max_slots=8, rate_hz=40.0,
                        gather=PrefillGather(wait_s=0.2, min_batch=4, min_decoding=1))
    assert gathered["num_prefills"] < spread["num_prefills"] and gathered["stall_over_50ms"] == 0
    assert 0 < gathered["vocoder_gpu_share"] and 0 < gathered["prefill_gpu_share"] < gathered["decode_gpu_share"]


def test_vocoder_slots_beyond_the_talkers_leave_room_for_finished_streams():
    # 4 talker slots; the vocoder keeps a stream after its talker finished until its audio is out:
    # with the vocoder's slots equal to the talker's, arrivals also wait for those tails
    same = simulate(8, 40, 25, parse_policy([]), Costs(), stagger_s=0.0, max_slots=4, rate_hz=40.0)
    more = simulate(8, 40, 25, parse_policy([]), Costs(), stagger_s=0.0, max_slots=4, rate_hz=40.0, vocoder_slots=8)
    assert more["queue_p95_ms"] < same["queue_p95_ms"] and more["stall_over_50ms"] == 0
    assert more["talker_mean_batch"] <= 4
