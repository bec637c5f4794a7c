"""service_common/hop_trace.py and benchmarks/first_audio_hops.py on their own: marks written per
process and joined per request; a folder that cannot be written turns the marks off, never a request
(the whole path across the three services: tests/test_bench_e2e_smoke.py)."""
from __future__ import annotations

import logging

from benchmarks.first_audio_hops import load_marks, summarize
from service_common import hop_trace


def test_marks_join_into_hops_per_request(tmp_path, monkeypatch):
    monkeypatch.setattr(hop_trace, "_DIR", str(tmp_path / "hops"))
    monkeypatch.setattr(hop_trace, "_file", None)
    for rid, event in (("r1", "g_text_in"), ("r1", "g_text_out"), ("r1", "g_audio_out"), ("r2", "g_text_in")):
        hop_trace.mark(rid, event)
    hop_trace._file.close()
    (tmp_path / "hops" / "999.tsv").write_text("r3\tg_text_in\n")   # a line cut short while being written
    marks = load_marks(tmp_path / "hops")
    assert set(marks) == {"r1", "r2"}
    assert marks["r1"]["g_text_in"] <= marks["r1"]["g_text_out"] <= marks["r1"]["g_audio_out"]
    hops = summarize(marks, ["r1", "r2", "unknown"])
    assert set(hops) == {"gateway_text", "ttfa"}   # only hops some request has both ends of
    assert hops["ttfa"]["n"] == 1 and hops["ttfa"]["p50_ms"] >= hops["gateway_text"]["p50_ms"] >= 0


def test_an_unwritable_folder_turns_the_marks_off(tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setattr(hop_trace, "_DIR", str(blocker / "hops"))
    monkeypatch.setattr(hop_trace, "_file", None)
    with caplog.at_level(logging.WARNING):
        hop_trace.mark("r1", "g_text_in")   # no exception reaches the request
        hop_trace.mark("r1", "g_audio_out")
    assert hop_trace._DIR is None and not hop_trace.enabled()   # the per-step loops stop asking
    assert caplog.text.count("hop marks off") == 1
