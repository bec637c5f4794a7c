"""The Triton-or-reference plumbing that every kernel dispatcher in kernels/ shares.

A dispatcher (kernels/rmsnorm.py, kernels/snakebeta.py, ...) owns its routing rules (argument checks,
dtypes and sizes its kernel supports, autograd) and holds one TritonRoute for the rest:
- the lazy launcher: `<launcher_module>.<launcher_name>` is imported on the first Triton call, never
  at import time, so routing and the eager reference work without a triton wheel;
- the device check: CUDA tensors, or CPU tensors when the env var `cpu_env` is "1" (tests set it with
  TRITON_INTERPRET=1 before triton is imported, to run the kernel in the Triton interpreter);
- the failure memory: if importing triton, compiling or launching raises, the failure is logged once
  with its traceback, and that call and every later one use the eager reference until
  reset_failure(). Sticky because a broken toolchain fails the same way every time, and trying to
  compile again on every call would cost seconds per call (a model step makes hundreds of them).
"""
from __future__ import annotations

import importlib
import logging
import os
import threading
from typing import Callable, Optional, TypeVar

import torch

T = TypeVar("T")


class TritonRoute:
    """Failure memory + lazy launcher + device/env check for one Triton kernel."""

    def __init__(self, kernel_name: str, launcher_module: str, launcher_name: str, cpu_env: str,
                 logger_name: str):
        self.kernel_name = kernel_name  # as it reads in the warning: "Triton <kernel_name> failed (...)"
        self.launcher_module = launcher_module
        self.launcher_name = launcher_name
        self.cpu_env = cpu_env
        # the dispatcher's logger, so the warning names the dispatcher module
        self.logger = logging.getLogger(logger_name)
        self.failure: Optional[str] = None  # "ExcType: message" of the first Triton failure, sticky
        self.launcher: Optional[Callable[..., object]] = None  # set on first use (tests set stand-ins)
        self._lock = threading.Lock()

    def triton_failure(self) -> Optional[str]:
        """The recorded Triton failure ("ExcType: message"), or None while the kernel is in use."""
        return self.failure

    def reset_failure(self) -> None:
        """Forget a recorded failure so the next call tries Triton again (tests, or after a fix)."""
        with self._lock:
            self.failure = None

    def record_failure(self, exc: BaseException) -> None:
        """Remember the first failure and log it once, with its traceback; later ones are ignored."""
        with self._lock:
            if self.failure is not None:
                return
            self.failure = f"{type(exc).__name__}: {exc}"
        self.logger.warning("Triton %s failed (%s); using the eager reference for the rest of this process",
                            self.kernel_name, self.failure, exc_info=exc)

    def get_launcher(self) -> Optional[Callable[..., object]]:
        """The launcher, imported on first use; None (failure recorded) if the import raises."""
        if self.launcher is None:
            try:
                launcher = getattr(importlib.import_module(self.launcher_module), self.launcher_name)
            except Exception as exc:  # no triton wheel, or a broken install: same fallback as a compile error
                self.record_failure(exc)
                return None
            self.launcher = launcher
        return self.launcher

    def allows(self, tensor: torch.Tensor) -> bool:
        """No failure recorded, and `tensor` is on CUDA or the CPU path is asked for via cpu_env."""
        return self.failure is None and (tensor.is_cuda or os.environ.get(self.cpu_env) == "1")

    def run(self, args: tuple, reference: Callable[..., T], wanted: bool) -> T:
        """launcher(*args) when `wanted` (the dispatcher's routing said Triton) and the launcher loads
        and runs; otherwise, or when loading or launching raised (recorded), reference(*args)."""
        if wanted:
            launcher = self.get_launcher()
            if launcher is not None:
                try:
                    return launcher(*args)
                except Exception as exc:  # compile/launch errors come in many types; inputs were checked
                    self.record_failure(exc)
        return reference(*args)
