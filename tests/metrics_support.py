"""Scraping a service's Prometheus endpoint over real HTTP, as Prometheus does. No tests here;
every wait has a deadline."""
from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable

from prometheus_client.parser import text_string_to_metric_families

SCRAPE_TIMEOUT_S = 5.0


def scrape(port: int, host: str = "127.0.0.1") -> dict[str, float]:
    """GET /metrics -> {sample name: value} of the unlabelled samples (counters end in `_total`)."""
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=SCRAPE_TIMEOUT_S) as reply:
        assert reply.status == 200
        text = reply.read().decode()
    return {sample.name: sample.value for family in text_string_to_metric_families(text)
            for sample in family.samples if not sample.labels}


def wait_scrape(port: int, until: Callable[[dict[str, float]], bool], timeout_s: float,
                host: str = "127.0.0.1", between: Callable[[], None] = lambda: time.sleep(0.05)) -> dict[str, float]:
    """Scrapes until `until(values)` holds; `between` runs between scrapes (pump an in-process loop)."""
    deadline = time.monotonic() + timeout_s
    while True:
        values = scrape(port, host)
        if until(values):
            return values
        assert time.monotonic() < deadline, f"metrics never met the condition within {timeout_s} s: {values}"
        between()
