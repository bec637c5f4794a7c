"""Compare TTFA of two groups of bench_e2e runs, level by level (issue #14: a registered voice
should cost what a CustomVoice speaker costs, TTFA within 10% at every concurrency).

One bench_e2e pass runs few streams per level, all starting together, so one pass's level median
moves by up to 20 ms between runs of the same code. Several passes per group help twice: the
per-pass values and their median show the spread, and the pooled percentiles (over every stream
of every pass) rest on the most samples; the verdict uses the pooled p50.

    python benchmarks/compare_e2e_runs.py --a cv-pass1.json cv-pass2.json --b reg-pass1.json reg-pass2.json \\
        --a-name custom-voice --b-name registered-xvector --tolerance 0.10 --out-json c.json --out-md c.md

Group A is the reference, B the candidate; the ratio is B/A. B is within the tolerance when it is
at most `tolerance` slower than A (a faster B passes).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_json import read_bench_json  # noqa: E402

LONE_STREAM = "lone stream"   # the table's label for the steady single-stream row


def percentile_ms(values_ms: list[float], q: float) -> float:
    """np.percentile's default (linear) method, the one bench_e2e reports with."""
    return float(np.percentile(values_ms, q))


def level_rows(run: dict) -> dict[int, dict]:
    """concurrency -> that level's row of one bench_e2e result."""
    return {int(row["concurrency"]): row for row in run["levels"]}


def level_summary(runs: list[dict], concurrency: int) -> dict:
    """One group's TTFA at one level: p50/p95 per pass, their medians over the passes, and the
    pooled p50/p95 over the raw streams of all passes. Passes without the level are left out."""
    rows = [level_rows(run)[concurrency] for run in runs if concurrency in level_rows(run)]
    if not rows:
        raise ValueError(f"no run of the group has concurrency {concurrency}")
    per_pass = [[float(r["ttfa_ms"]) for r in row["raw"]] for row in rows]
    pooled = [ttfa_ms for stream_ttfa_ms in per_pass for ttfa_ms in stream_ttfa_ms]
    p50s = [percentile_ms(values, 50) for values in per_pass]
    p95s = [percentile_ms(values, 95) for values in per_pass]
    return {"num_passes": len(rows), "num_streams": len(pooled),
            "pass_p50_ms": p50s, "pass_p95_ms": p95s,
            "median_p50_ms": float(np.median(p50s)), "median_p95_ms": float(np.median(p95s)),
            "pooled_p50_ms": percentile_ms(pooled, 50), "pooled_p95_ms": percentile_ms(pooled, 95)}


def lone_stream_summary(runs: list[dict]) -> dict | None:
    """The steady lone-stream TTFA (text word by word) per pass and its median over the passes;
    None when no run started its own stack (bench_e2e measures it only then)."""
    values = [float(run["single_stream"]["steady_words"]["ttfa_ms_p50"]) for run in runs if run.get("single_stream")]
    if not values:
        return None
    return {"num_passes": len(values), "pass_p50_ms": values, "median_p50_ms": float(np.median(values))}


def verdict(a_ms: float, b_ms: float, tolerance: float) -> dict:
    """B/A and whether B is at most `tolerance` slower than A."""
    ratio = b_ms / a_ms if a_ms > 0 else float("inf")
    return {"ratio": ratio, "within_tolerance": bool(ratio <= 1.0 + tolerance)}


def common_levels(a_runs: list[dict], b_runs: list[dict]) -> list[int]:
    """Concurrency levels some run of each group measured, ascending."""
    def levels(runs):
        return {c for run in runs for c in level_rows(run)}
    return sorted(levels(a_runs) & levels(b_runs))


def load_shape(run: dict) -> tuple[bool, int | None]:
    """What must match for two runs' TTFA to compare: staggered or burst starts (runs written
    before the option existed started in bursts) and the utterance length."""
    return bool(run.get("stagger_starts", False)), run.get("frames_per_utterance")


def compare(a_runs: list[dict], b_runs: list[dict], tolerance: float = 0.10) -> dict:
    """Per level: both groups' summaries and the verdict on the pooled p50; the lone-stream row
    compares the medians over the passes. `all_within` covers every compared row."""
    if not a_runs or not b_runs:
        raise ValueError("each group needs at least one run")
    shapes = {load_shape(run) for run in a_runs + b_runs}
    if len(shapes) > 1:
        raise ValueError("the runs differ in load shape (stagger_starts, frames_per_utterance): "
                         f"{sorted(shapes, key=str)}; compare like with like")
    levels = []
    for concurrency in common_levels(a_runs, b_runs):
        a, b = level_summary(a_runs, concurrency), level_summary(b_runs, concurrency)
        levels.append({"concurrency": concurrency, "a": a, "b": b,
                       **verdict(a["pooled_p50_ms"], b["pooled_p50_ms"], tolerance)})
    lone = None
    a_lone, b_lone = lone_stream_summary(a_runs), lone_stream_summary(b_runs)
    if a_lone and b_lone:
        lone = {"a": a_lone, "b": b_lone, **verdict(a_lone["median_p50_ms"], b_lone["median_p50_ms"], tolerance)}
    rows = levels + ([lone] if lone else [])
    return {"tolerance": tolerance, "levels": levels, "lone_stream": lone,
            "all_within": bool(rows) and all(row["within_tolerance"] for row in rows)}


def _ms(value_ms: float | None) -> str:
    return "" if value_ms is None else f"{value_ms:.1f}"


def _table_row(label: str, name: str, s: dict, verdict_cells: str) -> str:
    """One group's cells; the lone-stream summary has no p95, pooled figures or stream count."""
    per_pass = ", ".join(_ms(v) for v in s["pass_p50_ms"])
    cells = [label, name, per_pass, _ms(s["median_p50_ms"]), _ms(s.get("median_p95_ms")),
             _ms(s.get("pooled_p50_ms")), _ms(s.get("pooled_p95_ms")), str(s.get("num_streams", "")), verdict_cells]
    return "| " + " | ".join(cells) + " |"


def _verdict_cells(row: dict, note: str = "") -> str:
    return f"{row['ratio']:.3f}{note} | {'yes' if row['within_tolerance'] else 'NO'}"


def markdown(result: dict, a_name: str, b_name: str) -> str:
    """Two rows per level (A, then B with the verdict), then the lone-stream rows."""
    pct = round(result["tolerance"] * 100)
    lines = [f"TTFA (ms), {b_name} (B) against {a_name} (A); verdict on the pooled p50, B at most {pct}% slower",
             "",
             "| level | group | p50 per pass | median p50 | median p95 | pooled p50 | pooled p95 | streams "
             "| B/A pooled p50 | within |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for level in result["levels"]:
        label = f"c={level['concurrency']}"
        lines.append(_table_row(label, a_name, level["a"], " | "))
        lines.append(_table_row(label, b_name, level["b"], _verdict_cells(level)))
    lone = result["lone_stream"]
    if lone:
        lines.append(_table_row(LONE_STREAM, a_name, lone["a"], " | "))
        lines.append(_table_row(LONE_STREAM, b_name, lone["b"], _verdict_cells(lone, " (medians)")))
    lines += ["", f"all within {pct}%: {'yes' if result['all_within'] else 'NO'}"]
    return "\n".join(lines) + "\n"


def load_runs(paths: list[str]) -> list[dict]:
    return [read_bench_json(path) for path in paths]


def group_name(runs: list[dict], given: str) -> str:
    """The given name, else the workload the runs record (joined when they differ)."""
    return given or "+".join(sorted({str(run.get("workload", "?")) for run in runs}))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--a", nargs="+", required=True, help="bench_e2e JSON files of the reference group")
    p.add_argument("--b", nargs="+", required=True, help="bench_e2e JSON files of the candidate group")
    p.add_argument("--a-name", default="", help="label of group A (default: its runs' workload)")
    p.add_argument("--b-name", default="", help="label of group B (default: its runs' workload)")
    p.add_argument("--tolerance", type=float, default=0.10, help="how much slower B may be, as a fraction of A")
    p.add_argument("--out-json", default="", help="write the comparison here")
    p.add_argument("--out-md", default="", help="write the markdown table here")
    args = p.parse_args(argv)
    a_runs, b_runs = load_runs(args.a), load_runs(args.b)
    a_name, b_name = group_name(a_runs, args.a_name), group_name(b_runs, args.b_name)
    result = compare(a_runs, b_runs, args.tolerance)
    result.update(a_name=a_name, b_name=b_name, a_files=args.a, b_files=args.b,
                  commits=sorted({str(run.get("commit", "?")) for run in a_runs + b_runs}))
    table = markdown(result, a_name, b_name)
    print(table, end="")
    if args.out_json:
        Path(args.out_json).write_text(json.dumps(result, indent=1))
    if args.out_md:
        Path(args.out_md).write_text(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
