"""service_common/event_loop.py and the gateway's --event-loop: uvloop when installed (auto), the
standard loop on request, a clear error when uvloop is required but missing."""
from __future__ import annotations

import asyncio
import sys

import pytest

from gateway.config import GatewayConfig
from gateway.main import config_from
from service_common import event_loop


async def _loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__.split(".")[0]


def test_asyncio_runs_the_standard_loop():
    assert event_loop.loop_factory("asyncio") is None
    assert event_loop.run(_loop_module(), "asyncio") == "asyncio"


def test_auto_takes_uvloop_when_installed():
    uvloop = pytest.importorskip("uvloop")   # a dependency on Linux and macOS (pyproject.toml)
    assert event_loop.loop_factory("auto") is uvloop.new_event_loop
    assert event_loop.run(_loop_module(), "auto") == "uvloop"


def test_without_uvloop_auto_falls_back_and_uvloop_is_an_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "uvloop", None)   # import uvloop -> ImportError
    assert event_loop.loop_factory("auto") is None
    assert event_loop.run(_loop_module(), "auto") == "asyncio"
    with pytest.raises(RuntimeError, match="uvloop package is not installed"):
        event_loop.loop_factory("uvloop")


def test_a_bad_choice_is_refused_by_name():
    with pytest.raises(ValueError, match="event loop must be one of auto, uvloop, asyncio"):
        event_loop.loop_factory("trio")
    with pytest.raises(ValueError, match="event_loop must be one of"):
        GatewayConfig(event_loop="trio")


def test_gateway_flag_and_env():
    assert config_from([], {}).event_loop == "auto"
    assert config_from(["--event-loop", "asyncio"], {}).event_loop == "asyncio"
    assert config_from([], {"QWEN3_TTS_GATEWAY_EVENT_LOOP": "uvloop"}).event_loop == "uvloop"
