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
    _patch_default_rope()
    return sys.modules["qwen_tts"]


def _patch_default_rope() -> None:
    """qwen-tts-hf registers a "default" RoPE initialiser that reads `config.rope_theta`; newer
    Transformers 5 configs (e.g. MimiConfig) keep theta only in `config.rope_parameters`. Wrap it
    so both config styles work. Same math: inv_freq = theta^(-2i/dim)."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    original = ROPE_INIT_FUNCTIONS.get("default")
    if original is None or getattr(original, "_theta_patched", False):
        return

    def default_rope(config, device=None, seq_len=None, layer_type=None):
        if not hasattr(config, "rope_theta"):
            params = getattr(config, "rope_parameters", None) or {}
            if layer_type is not None and layer_type in params:
                params = params[layer_type]
            config.rope_theta = params["rope_theta"]
        return original(config, device=device, seq_len=seq_len, layer_type=layer_type)

    default_rope._theta_patched = True
    ROPE_INIT_FUNCTIONS["default"] = default_rope
