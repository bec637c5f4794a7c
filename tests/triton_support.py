"""Test helpers shared by the Triton kernel tests (tests/test_snakebeta.py, test_rmsnorm.py, ...).

Every kernel is tested the same way: real launches run in ONE child process started with
TRITON_INTERPRET=1 (triton.jit picks the interpreter when the kernel module is imported, so it must be
in the environment before that) and the dispatcher's CPU env var set; the child saves outputs and an
info.json, the parent compares. Routing and fallbacks are tested in-process with stand-in launchers
patched onto the dispatcher's kernels.triton_route.TritonRoute (`module._route`).

This module must not import triton: the child imports it before its kernel module.
"""
from __future__ import annotations

import collections
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable, Optional

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # the child process runs without tests/conftest.py
    sys.path.insert(0, str(ROOT))


class OpCounter(TorchDispatchMode):
    """Every op dispatched while active: counts by overload packet ("aten.mul") and the full names in order."""

    def __init__(self):
        super().__init__()
        self.counts = collections.Counter()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.counts[str(func.overloadpacket)] += 1
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


# ---------------------------------------------------------------------------------------------
# The interpreter child process


def run_interpreter_child(test_file: str, work_dir: Path, cpu_env: str, timeout: float) -> dict:
    """Run `python TEST_FILE --child WORK_DIR` with TRITON_INTERPRET=1 and cpu_env=1; its info.json."""
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(ROOT), **{cpu_env: "1"})
    proc = subprocess.run(
        [sys.executable, str(Path(test_file).resolve()), "--child", str(work_dir)],
        env=env, cwd=str(ROOT), capture_output=True, text=True, timeout=timeout,
    )
    assert proc.returncode == 0, f"child failed:\n{proc.stdout}\n{proc.stderr}"
    return json.loads((work_dir / "info.json").read_text())


_SMOKE_BOOT = """
import runpy, sys
tests_dir, script = sys.argv[1], sys.argv[2]
sys.path.insert(0, tests_dir)
import triton_support
triton_support._backport_interpreter_index_fix()
sys.argv = sys.argv[2:]
runpy.run_path(script, run_name="__main__")
"""


def run_benchmark_smoke(script: str, out_path: Path, timeout: float = 300) -> dict:
    """`benchmarks/SCRIPT --smoke --out OUT_PATH` in a process of its own (the interpreter must be
    chosen before triton is imported), with the interpreter fix the kernel children get (runtime loop
    bounds under triton < 3.7 and numpy >= 2.4); asserts it exits 0, returns its JSON."""
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run([sys.executable, "-c", _SMOKE_BOOT, str(Path(__file__).resolve().parent),
                           str(ROOT / "benchmarks" / script), "--smoke", "--out", str(out_path)],
                          cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    return json.loads(out_path.read_text())


def save_child_results(work_dir: Path, outputs: dict, dispatcher, is_interpreting: bool,
                       counter: Optional[OpCounter] = None) -> None:
    """In the child: outputs.pt, and info.json saying whether the dispatcher took the Triton path."""
    torch.save(outputs, work_dir / "outputs.pt")
    info = {
        "is_interpreting": is_interpreting,
        "dispatcher_failure": dispatcher.triton_failure(),
        "dispatcher_loaded_launcher": dispatcher._route.launcher is not None,
    }
    if counter is not None:
        info["triton_path_op_counts"] = dict(counter.counts)
    (work_dir / "info.json").write_text(json.dumps(info))


def _backport_interpreter_index_fix() -> None:
    """Triton < 3.7's interpreter turns a scalar into an int (`range(start, end)` with runtime
    bounds, as the slot attention kernel loops to each row's length) by int() of its 1-element
    array, which numpy >= 2.4 refuses ("only 0-dimensional arrays can be converted to Python
    scalars"; triton-lang/triton#9171). The GPU image pairs triton 3.6 with numpy 2.5, so in the
    kernel children and benchmark smoke runs only, apply the fix triton 3.7 shipped: squeeze the
    array first. The kernel keeps its
    `for` loop rather than a `while` (which the interpreter handles) because only `for` loops get
    software-pipelined K/V loads on the GPU."""
    import triton
    from triton.runtime import interpreter

    major, minor = (int(part) for part in triton.__version__.split(".")[:2])
    if (major, minor) >= (3, 7):
        return
    patch_tensor = interpreter._patch_lang_tensor  # called per launch, looked up by name

    def patch_tensor_with_squeezing_index(tensor, scope):
        patch_tensor(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.squeeze()))

    interpreter._patch_lang_tensor = patch_tensor_with_squeezing_index


def child_main(run_child: Callable[[Path], None]) -> None:
    """The test file's `__main__`: `--child WORK_DIR` runs run_child, anything else is a usage error."""
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        _backport_interpreter_index_fix()
        run_child(Path(sys.argv[2]))
    else:
        sys.exit(f"usage: {Path(sys.argv[0]).name} --child WORK_DIR (run by pytest)")


def assert_dispatcher_took_triton(info: dict) -> None:
    assert info["dispatcher_failure"] is None
    assert info["dispatcher_loaded_launcher"], "the dispatcher fell back to eager on CPU despite the env var"


def assert_dispatch_equals_kernel(info: dict, outputs: dict, names) -> None:
    """The dispatcher loaded the Triton launcher, and for each case named (one name or several) it
    returned exactly what the kernel launched directly returned (a tensor or a tuple of them): same
    launcher, same config, so the dispatcher must add nothing. The child saves both as
    `dispatch/NAME` and `kernel/NAME`."""
    assert_dispatcher_took_triton(info)
    for name in [names] if isinstance(names, str) else names:
        got, kernel = outputs[f"dispatch/{name}"], outputs[f"kernel/{name}"]
        for a, b in zip(got, kernel) if isinstance(got, (tuple, list)) else [(got, kernel)]:
            assert torch.equal(a, b), name


# ---------------------------------------------------------------------------------------------
# In-process routing with stand-in launchers


def counting(launcher: Callable, calls: dict, key: str) -> Callable:
    """`launcher`, adding each of its calls to calls[key] (which launchers a model run took)."""
    def launch(*args):
        calls[key] += 1
        return launcher(*args)
    return launch


def fresh_route(monkeypatch, dispatcher, route_attr: str = "_route"):
    """No recorded failure, no launcher loaded, no CPU env var: undone after the test. Returns monkeypatch.

    route_attr names the dispatcher's TritonRoute (a dispatcher with two entry points has two)."""
    route = getattr(dispatcher, route_attr)
    monkeypatch.setattr(route, "failure", None)
    monkeypatch.setattr(route, "launcher", None)
    monkeypatch.delenv(dispatcher.CPU_TRITON_ENV, raising=False)
    return monkeypatch


class CountingLauncher:
    """A stand-in launcher: counts calls, raises `error` if given, else returns result(*args)."""

    def __init__(self, result: Callable, error: Exception | None = None):
        self.result = result  # the reference plus something, so the Triton path is distinguishable
        self.num_calls = 0
        self.error = error

    def __call__(self, *args):
        self.num_calls += 1
        if self.error is not None:
            raise self.error
        return self.result(*args)


def use_launcher(fresh, dispatcher, launcher: CountingLauncher, route_attr: str = "_route") -> CountingLauncher:
    """Patch `launcher` in as the loaded one and force the CPU Triton path."""
    fresh.setattr(getattr(dispatcher, route_attr), "launcher", launcher)
    fresh.setenv(dispatcher.CPU_TRITON_ENV, "1")
    return launcher


def forbid_triton(fresh, dispatcher) -> None:
    """Fail the test if the dispatcher even tries to load its launcher."""
    fresh.setattr(dispatcher._route, "get_launcher", lambda: pytest.fail("Triton path taken on CPU"))


def equal_to(expected: torch.Tensor) -> Callable[[torch.Tensor], None]:
    """A check_reference for the check_* helpers below: the output is torch.equal to `expected`."""
    def check(got: torch.Tensor) -> None:
        assert torch.equal(got, expected)
    return check


def _warnings_from(caplog, dispatcher):
    return [r for r in caplog.records if r.name == dispatcher.__name__]


def check_failure_logged_once_and_remembered(fresh, caplog, dispatcher, call: Callable[[], object],
                                             check_reference: Callable[[object], None]) -> None:
    """A launcher that raises: one attempt, one warning naming the error, the reference every time;
    reset_triton_failure allows exactly one new attempt."""
    launcher = use_launcher(fresh, dispatcher, CountingLauncher(None, RuntimeError("ptxas died")))
    with caplog.at_level(logging.WARNING, logger=dispatcher.__name__):
        for _ in range(4):
            check_reference(call())
    assert launcher.num_calls == 1
    warnings = _warnings_from(caplog, dispatcher)
    assert len(warnings) == 1 and "ptxas died" in warnings[0].getMessage()
    assert dispatcher.triton_failure() == "RuntimeError: ptxas died"
    dispatcher.reset_triton_failure()
    call()
    assert launcher.num_calls == 2, "reset_triton_failure must allow one new attempt"


def check_import_failure_is_recorded(fresh, caplog, dispatcher, call: Callable[[], object],
                                     check_reference: Callable[[object], None]) -> None:
    """The launcher module cannot be imported: reference results, one warning, a ModuleNotFoundError."""
    fresh.setitem(sys.modules, dispatcher._route.launcher_module, None)  # import raises ImportError
    fresh.setenv(dispatcher.CPU_TRITON_ENV, "1")
    with caplog.at_level(logging.WARNING, logger=dispatcher.__name__):
        for _ in range(3):
            check_reference(call())
    assert dispatcher.triton_failure().startswith("ModuleNotFoundError")
    assert len(_warnings_from(caplog, dispatcher)) == 1


def check_real_launch_failure_falls_back(fresh, dispatcher, triton_module, call: Callable[[], object],
                                         check_reference: Callable[[object], None]) -> None:
    """A compiled (non-interpreted) kernel cannot take CPU tensors: the genuine error must be caught."""
    if triton_module.is_interpreting():
        pytest.skip("TRITON_INTERPRET=1 in this process: the CPU launch would succeed")
    fresh.setenv(dispatcher.CPU_TRITON_ENV, "1")
    check_reference(call())
    assert dispatcher.triton_failure() is not None


# ---------------------------------------------------------------------------------------------
# Ahead-of-time compile for Hopper (no GPU needed)


def skip_if_interpreting(triton_module) -> None:
    if triton_module.is_interpreting():
        pytest.skip("TRITON_INTERPRET=1 in this process: no compiled kernel object")


def compile_for_hopper(kernel, signature: dict, constants: dict, divisible=(), **options):
    """An sm_90 compile of `kernel` (args `divisible` marked 16-divisible, as the JIT specializes at
    run time); skips where this triton install has no ptxas. Asserts a cubin came out.

    A kernel with a `PDL` flag (kernels/pdl.py) is compiled as the GPU launches it on Hopper (PDL on,
    unless the caller set it), and its PTX must then wait for the prior grid (griddepcontrol.wait)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, compile as triton_compile

    if "PDL" in kernel.arg_names and "PDL" not in constants:
        constants, signature = {**constants, "PDL": True}, {**signature, "PDL": "constexpr"}
    source = ASTSource(kernel, signature, constants, {(i,): [["tt.divisibility", 16]] for i in divisible})
    try:
        compiled = triton_compile(source, target=GPUTarget("cuda", 90, 32), options=options)
    except (RuntimeError, FileNotFoundError) as exc:
        if "ptxas" in str(exc).lower():
            pytest.skip(f"no ptxas in this triton install: {exc}")
        raise
    assert compiled.asm["cubin"], "ptxas produced no cubin"
    if constants.get("PDL"):
        assert "griddepcontrol.wait" in compiled.asm["ptx"], "a PDL kernel must wait for the prior grid"
    return compiled
