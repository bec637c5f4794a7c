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
