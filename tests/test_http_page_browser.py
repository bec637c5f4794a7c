"""The page in a real browser: Debian's chromium, driven by Playwright through `executable_path`
(no browser download), against a real stack on loopback (tiny model, CPU). It speaks a sentence
over HTTP and again word by word over the WebSocket, and checks the page's own counters: samples
scheduled on the Web Audio clock, time to first audio, no error. The screenshot is kept under
build/test-artifacts/."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from process_support import http_stack

pytestmark = pytest.mark.timeout(300)
ARTIFACTS = Path(__file__).resolve().parents[1] / "build" / "test-artifacts"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
WAIT_MS = 120_000
# The tiny random model stops where it samples its end of speech: a sentence has come back as 7
# frames (13440 samples) as well as several seconds, so the page must have scheduled at least a frame
# and, over the WebSocket, exactly what the server's summary says it made.
ONE_FRAME_SAMPLES = 1920


@pytest.fixture(scope="module")
def page_url(tmp_path_factory):
    work = tmp_path_factory.mktemp("page-stack")
    launcher = http_stack(work)
    try:
        yield launcher.wait_ready(130)["http_url"] + "/"
    finally:
        launcher.stop(40)


def test_the_page_speaks_over_http_and_over_the_websocket(page_url):
    from playwright.sync_api import sync_playwright
    if not Path(CHROMIUM).exists():
        pytest.fail(f"chromium is not installed at {CHROMIUM}: run `bash scripts/install_browser.sh` (scripts/test.sh does)")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                             args=["--no-sandbox", "--autoplay-policy=no-user-gesture-required"])
        try:
            page = browser.new_page()
            console = []
            page.on("console", lambda message: console.append(message.text))
            page.goto(page_url)
            page.wait_for_function("document.getElementById('status').textContent === 'ready'", timeout=WAIT_MS)
            assert page.locator("#voice option").count() == 9   # the CustomVoice speakers
            page.select_option("#voice", "serena")
            page.fill("#text", "Hello from the browser.")

            page.click("#speak")
            page.wait_for_function("window.ttsStats.done >= 1 || window.ttsStats.error", timeout=WAIT_MS)
            http_stats = page.evaluate("({...window.ttsStats})")
            assert http_stats["error"] is None, (http_stats, console)
            assert http_stats["mode"] == "http" and http_stats["samplesScheduled"] >= ONE_FRAME_SAMPLES
            assert http_stats["samplesScheduled"] % ONE_FRAME_SAMPLES == 0   # whole frames: no chunk cut or lost
            assert http_stats["ttfaMs"] > 0 and http_stats["rtf"] > 0
            assert page.locator("#samples").text_content() == str(http_stats["samplesScheduled"])

            page.check("input[name=mode][value=ws]")
            page.click("#speak")
            page.wait_for_function("window.ttsStats.done >= 2 || window.ttsStats.error", timeout=WAIT_MS)
            ws_stats = page.evaluate("({...window.ttsStats})")
            assert ws_stats["error"] is None, (ws_stats, console)
            assert ws_stats["mode"] == "ws" and ws_stats["samplesScheduled"] >= ONE_FRAME_SAMPLES
            # the server's summary agrees with what the page scheduled
            assert ws_stats["summary"]["num_frames"] * ONE_FRAME_SAMPLES == ws_stats["samplesScheduled"]
            assert "TTFA" in page.locator("#server").text_content()
            page.screenshot(path=str(ARTIFACTS / "http-page.png"), full_page=True)
        finally:
            browser.close()
