"""What one gateway process pays per call, and how long a call opened in a wave waits for its start
message, without a GPU (issue #36: at 256 streams in waves the client's wait for the start message
was most of its TTFA p95; benchmarks/results/2026-11-28-gapless6-h200.md).

One `python -m gateway --workers 1` process (the tiny checkpoint's tokenizer) against the tests'
fake talker (tests/test_gateway_support.py: ACKs at once, one PCM chunk per text token) in this
process's thread; an asyncio client opens `--calls` calls at once, each streaming the text word by
word (or whole with `--whole-text`), `--rounds` times after a warm-up. Per round: the gateway's CPU
time per call (from /proc) and the start-message wait p50 / p95 / max as the client saw it.

    python benchmarks/probe_gateway_starts.py --calls 64 --rounds 5 [--whole-text] [--out probe.json]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from checkpoint.files import resolve_model_dir  # noqa: E402
from client import TtsClient  # noqa: E402
from protos.tts.v1 import config_pb2  # noqa: E402
from test_gateway_support import FakeTalker  # noqa: E402

TEXT = "the quick brown fox jumps over the lazy dog again and again today"
WAIT_S = 60.0


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def one_call(client: TtsClient, texts: list[str], config) -> float:
    """-> seconds from opening the call to its start message (the call is read to its end)."""
    t0, start_s = time.monotonic(), None
    async for response in client.stream(texts, config, timeout_s=WAIT_S):
        if response.HasField("start") and start_s is None:
            start_s = time.monotonic() - t0
    if start_s is None:
        raise RuntimeError("a call ended without a start message")
    return start_s


async def probe(calls: int, rounds: int, whole_text: bool, work: Path) -> list[dict]:
    talker = FakeTalker(num_slots=max(64, 4 * calls))
    ready = work / "gateway.ready.json"
    proc = subprocess.Popen([sys.executable, "-m", "gateway", "--talkers", talker.endpoint,
                             "--model", str(resolve_model_dir("tiny")), "--grpc-host", "127.0.0.1", "--grpc-port", "0",
                             "--metrics-port", "-1", "--http-port", "-1", "--workers", "1",
                             "--voices-dir", str(work / "voices"), "--ready-file", str(ready)],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = None
    try:
        deadline = time.monotonic() + WAIT_S
        while not ready.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the gateway did not start")
            await asyncio.sleep(0.05)
        info = json.loads(ready.read_text())
        client = TtsClient(f"127.0.0.1:{info['grpc_port']}")
        await client.wait_serving(WAIT_S)
        words = TEXT.split(" ")
        texts = [TEXT] if whole_text else [w + " " for w in words[:-1]] + [words[-1]]
        config = config_pb2.SynthesisConfig(speaker=config_pb2.SpeakerVoice(name="Vivian"), language="English")
        await asyncio.gather(*(one_call(client, texts, config) for _ in range(8)))   # warm-up
        out = []
        for _ in range(rounds):
            cpu0_s = cpu_s(proc.pid)
            waits_ms = np.array(await asyncio.gather(*(one_call(client, texts, config) for _ in range(calls)))) * 1e3
            out.append({"calls": calls, "messages_per_call": len(texts),
                        "gateway_cpu_ms_per_call": round((cpu_s(proc.pid) - cpu0_s) * 1e3 / calls, 2),
                        "start_ms_p50": round(float(np.percentile(waits_ms, 50)), 1),
                        "start_ms_p95": round(float(np.percentile(waits_ms, 95)), 1),
                        "start_ms_max": round(float(waits_ms.max()), 1)})
            print(json.dumps(out[-1]), flush=True)
        return out
    finally:
        if client is not None:
            await client.close()
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        talker.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--calls", type=int, default=64, help="calls opened at once a round")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--whole-text", action="store_true", help="one text message a call, not one per word")
    p.add_argument("--out", default="", help="JSON results path")
    args = p.parse_args()
    if args.calls < 1 or args.rounds < 1:
        p.error("--calls and --rounds must be at least 1")
    with tempfile.TemporaryDirectory(prefix="probe-gateway-") as tmp:
        rounds = asyncio.run(probe(args.calls, args.rounds, args.whole_text, Path(tmp)))
    if args.out:
        Path(args.out).write_text(json.dumps({"whole_text": args.whole_text, "rounds": rounds}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
