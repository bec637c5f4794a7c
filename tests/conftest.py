import os
import sys
from pathlib import Path

# Make the repo importable without an install, e.g. when pytest runs straight from a checkout.
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# One torch thread: this suite runs on 2-core CI machines where torch's default of two threads per
# process, fighting the test runner and the subprocesses some tests start, made tiny-model tests
# 10-25x slower (measured: 202 s vs 37 s for the prompt/generate tests).
import torch  # noqa: E402

torch.set_num_threads(1)

# The files that take longest, in seconds (serial run, --durations, on the 2-core machine,
# 2026-11-28; setup included: a stack, a kernel interpreter child). They are collected first, so
# pytest-xdist (scripts/test.sh: whole files per worker, in collection order) starts them first:
# a long file dealt out last would run alone at the end while the other worker idles. Figures only
# rank the files; a stale one costs time, never correctness.
LONGEST_FILES_S = {
    "test_stack_busy_cpu.py": 161, "test_small_m_linear.py": 78, "test_sample_rows.py": 47,
    "test_qk_norm_rope_write_kv.py": 39, "test_talker_async_decode.py": 39, "test_liveness_busy.py": 31,
    "test_warp_pick.py": 31, "test_launcher_process.py": 31, "test_stack_e2e.py": 29,
    "test_talker_engine.py": 29, "test_bench_e2e_smoke.py": 27, "test_compose_run.py": 24,
    "test_norm_rope_attend.py": 23, "test_gpu_suite_script.py": 21,
    "test_qk_norm_rope.py": 19, "test_startup_errors.py": 19, "test_silu_mul.py": 17,
    # files added later the same day, timed with two workers
    "test_http_api.py": 45, "test_text_stream_real_vocab.py": 25, "test_http_page_browser.py": 21,
    "test_bench_http_smoke.py": 17,
}


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(sorted(LONGEST_FILES_S, key=LONGEST_FILES_S.get, reverse=True))}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))   # stable: files and tests keep their order
