"""A bench_e2e run's JSON, plain or gzipped (.gz: how the results folder keeps the large ones)."""
from __future__ import annotations

import gzip
import json
from pathlib import Path


def read_bench_json(path: str | Path) -> dict:
    data = Path(path).read_bytes()
    return json.loads(gzip.decompress(data) if str(path).endswith(".gz") else data)
