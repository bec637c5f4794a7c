"""Import the official qwen-tts-hf implementation as a test-only oracle.

The package's import chain pulls the unused 25 Hz tokenizer, which imports torchaudio; the
registry's torchaudio does not load against torch 2.13 CPU. Stub modules (with a ModuleSpec, so
transformers' availability probe accepts them) stand in for it. Nothing in the oracle paths we
use calls into torchaudio.
"""
from __future__ import annotations

import importlib.machinery
import sys
import types

import pytest

_STUBS = ("torchaudio", "torchaudio.compliance", "torchaudio.compliance.kaldi")


def _install_torchaudio_stub() -> None:
    try:  # a working torchaudio needs no stub
        import torchaudio  # noqa: F401
        return
    except Exception:
        for name in _STUBS:
            sys.modules.pop(name, None)
    for name in _STUBS:
        module = types.ModuleType(name)
        module.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
        module.__path__ = []
        sys.modules[name] = module
    sys.modules["torchaudio"].compliance = sys.modules["torchaudio.compliance"]
    sys.modules["torchaudio.compliance"].kaldi = sys.modules["torchaudio.compliance.kaldi"]


def import_oracle():
    """Return the `qwen_tts` package; fail (not skip) when it is missing: CI installs it."""
    _install_torchaudio_stub()
    try:
        import qwen_tts  # noqa: F401
    except ImportError as exc:  # pragma: no cover - only on a broken install
        pytest.fail(f"official oracle qwen-tts-hf is not importable ({exc}); run scripts/test.sh")
    return sys.modules["qwen_tts"]
