"""silu_mul's op and dispatcher, in-process with stand-in launchers (no interpreter child): the
qwen3tts::silu_mul op counts as one launch, traces as one node and passes opcheck; the dispatcher
takes the reference by default on CPU, calls the launcher when forced (with norm_source and eps),
stays eager on the grad path, remembers a Triton failure and rejects bad arguments without
recording one. The kernel itself is tested in tests/test_silu_mul.py.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

# triton_support first: it puts the repo root on sys.path for the kernels imports below
from triton_support import (CountingLauncher, OpCounter, check_failure_logged_once_and_remembered,
                            check_import_failure_is_recorded, check_real_launch_failure_falls_back, equal_to,
                            forbid_triton, fresh_route, use_launcher)
from kernels import silu_mul
from kernels.silu_mul_reference import silu_mul_reference
from silu_mul_cases import EPS, OP_NAME, _bits_equal, _make


# ---------------------------------------------------------------------------------------------
# Op registration, counting, tracing (in-process; CPU default path = reference inside the op)


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_op_counts_as_one_launch(device):
    gate_up = _make((3, 2, 2 * 384), torch.bfloat16, seed=7).to(device)
    with torch.no_grad(), OpCounter() as counter:
        y = silu_mul.silu_mul(gate_up)
    assert dict(counter.counts) == {OP_NAME: 1}
    assert y.shape == (3, 2, 384) and y.dtype == torch.bfloat16 and y.device.type == device
    with torch.no_grad(), OpCounter() as eager:
        silu_mul_reference(gate_up)
    assert eager.counts["aten.silu"] == 1 and eager.counts["aten.mul"] == 1, eager.counts  # what the op replaces


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_op_with_norm_counts_as_one_launch(device):
    """The deferred norm adds no op: still one qwen3tts::silu_mul, where eager needs an RMSNorm's worth."""
    gate_up = _make((3, 2, 2 * 384), torch.bfloat16, seed=7).to(device)
    h = _make((3, 2, 1024), torch.bfloat16, seed=8).to(device)
    with torch.no_grad(), OpCounter() as counter:
        y = silu_mul.silu_mul(gate_up, h, EPS)
    assert dict(counter.counts) == {OP_NAME: 1}
    assert y.shape == (3, 2, 384) and y.dtype == torch.bfloat16 and y.device.type == device
    with torch.no_grad(), OpCounter() as eager:
        silu_mul_reference(gate_up, h, EPS)
    assert eager.counts["aten.rsqrt"] == 1 and eager.counts["aten.mean"] == 1, eager.counts


def test_make_fx_sees_one_node():
    from torch.fx.experimental.proxy_tensor import make_fx

    gate_up = _make((2, 2 * 256), torch.bfloat16, seed=8)
    gm = make_fx(lambda g: silu_mul.silu_mul(g), tracing_mode="fake")(gate_up)
    calls = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert calls == [torch.ops.qwen3tts.silu_mul.default], calls
    h = _make((2, 1000), torch.bfloat16, seed=9)
    gm = make_fx(lambda g, n: silu_mul.silu_mul(g, n, EPS), tracing_mode="fake")(gate_up, h)
    calls = [n for n in gm.graph.nodes if n.op == "call_function"]
    assert [n.target for n in calls] == [torch.ops.qwen3tts.silu_mul.default], calls
    assert calls[0].args[2] == EPS, calls[0].args  # eps is recorded in the graph


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_opcheck(dtype):
    gate_up = _make((3, 4, 2 * 128), dtype, seed=9)
    torch.library.opcheck(torch.ops.qwen3tts.silu_mul.default, (gate_up,))
    torch.library.opcheck(torch.ops.qwen3tts.silu_mul.default, (gate_up[..., 64:192],))  # strided view
    h = _make((3, 4, 96), dtype, seed=10)
    torch.library.opcheck(torch.ops.qwen3tts.silu_mul.default, (gate_up, h, EPS))
    torch.library.opcheck(torch.ops.qwen3tts.silu_mul.default, (gate_up[..., 64:192], h[..., :50], 0.0))


# ---------------------------------------------------------------------------------------------
# Dispatcher routing and fallbacks (in-process, stand-in launchers)


@pytest.fixture
def fresh_dispatcher(monkeypatch):
    return fresh_route(monkeypatch, silu_mul)


def _stand_in():
    # distinguishable from eager; takes the op's arguments (gate_up, norm_source, eps)
    return CountingLauncher(lambda gate_up, norm_source, eps: silu_mul_reference(gate_up, norm_source, eps) + 1.0)


def test_cpu_default_uses_reference_without_touching_triton(fresh_dispatcher):
    forbid_triton(fresh_dispatcher, silu_mul)
    for dtype in (torch.float32, torch.bfloat16):
        gate_up = _make((3, 5, 256), dtype, seed=1)
        assert torch.equal(silu_mul.silu_mul(gate_up), silu_mul_reference(gate_up))


def test_cpu_default_with_norm_uses_reference(fresh_dispatcher):
    forbid_triton(fresh_dispatcher, silu_mul)
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        gate_up, h = _make((3, 5, 256), dtype, seed=1), _make((3, 5, 1000), dtype, seed=2)
        assert _bits_equal(silu_mul.silu_mul(gate_up, h, EPS), silu_mul_reference(gate_up, h, EPS))
        assert _bits_equal(silu_mul.silu_mul(gate_up, norm_source=h), silu_mul_reference(gate_up, h, 0.0))


def test_forced_cpu_path_passes_norm_to_launcher(fresh_dispatcher):
    seen = []
    launcher = use_launcher(fresh_dispatcher, silu_mul, CountingLauncher(
        lambda *args: seen.append(args) or silu_mul_reference(*args) + 1.0))
    gate_up, h = _make((7, 512), torch.float32, seed=1), _make((7, 100), torch.float32, seed=2)
    assert torch.equal(silu_mul.silu_mul(gate_up, h, EPS), silu_mul_reference(gate_up, h, EPS) + 1.0)
    assert seen[0][1] is h and seen[0][2] == EPS and isinstance(seen[0][2], float)
    g64, h64 = gate_up.double(), h.double()  # no kernel for fp64: eager
    assert torch.equal(silu_mul.silu_mul(g64, h64, EPS), silu_mul_reference(g64, h64, EPS))
    assert silu_mul.silu_mul(gate_up[:0], h[:0], EPS).shape == (0, 256)
    assert launcher.num_calls == 1


def test_forced_cpu_path_calls_launcher(fresh_dispatcher):
    launcher = use_launcher(fresh_dispatcher, silu_mul, _stand_in())
    gate_up = _make((7, 512), torch.float32, seed=1)
    assert torch.equal(silu_mul.silu_mul(gate_up), silu_mul_reference(gate_up) + 1.0)
    # no kernel for fp64, nothing to do for an empty input: eager, launcher untouched
    g64 = gate_up.double()
    assert torch.equal(silu_mul.silu_mul(g64), silu_mul_reference(g64))
    assert silu_mul.silu_mul(gate_up[:0]).shape == (0, 256)
    assert launcher.num_calls == 1


def test_grad_path_uses_reference_and_backprops(fresh_dispatcher):
    launcher = use_launcher(fresh_dispatcher, silu_mul, _stand_in())
    gate_up = _make((4, 256), torch.float32, seed=2).requires_grad_(True)
    y = silu_mul.silu_mul(gate_up)
    assert launcher.num_calls == 0 and y.requires_grad
    y.sum().backward()
    gate, up = gate_up.detach().chunk(2, dim=-1)
    torch.testing.assert_close(gate_up.grad[:, 128:], F.silu(gate))
    with torch.no_grad():
        silu_mul.silu_mul(gate_up)
    with torch.inference_mode():
        silu_mul.silu_mul(gate_up)
    assert launcher.num_calls == 2, "without grad mode the kernel must be used"


def test_grad_of_norm_source_uses_reference_and_backprops(fresh_dispatcher):
    launcher = use_launcher(fresh_dispatcher, silu_mul, _stand_in())
    gate_up = _make((4, 256), torch.float32, seed=2)
    h = _make((4, 64), torch.float32, seed=3).requires_grad_(True)
    y = silu_mul.silu_mul(gate_up, h, EPS)
    assert launcher.num_calls == 0 and y.requires_grad
    y.sum().backward()
    assert h.grad is not None and torch.isfinite(h.grad).all() and h.grad.abs().sum() > 0
    with torch.no_grad():
        silu_mul.silu_mul(gate_up, h, EPS)
    assert launcher.num_calls == 1, "without grad mode the kernel must be used"


def test_failure_is_logged_once_and_remembered(fresh_dispatcher, caplog):
    gate_up = _make((3, 5, 256), torch.bfloat16, seed=3)
    check_failure_logged_once_and_remembered(fresh_dispatcher, caplog, silu_mul, lambda: silu_mul.silu_mul(gate_up),
                                             equal_to(silu_mul_reference(gate_up)))


def test_failure_with_norm_is_logged_once_and_remembered(fresh_dispatcher, caplog):
    gate_up, h = _make((3, 5, 256), torch.bfloat16, seed=3), _make((3, 5, 1024), torch.bfloat16, seed=4)
    check_failure_logged_once_and_remembered(fresh_dispatcher, caplog, silu_mul,
                                             lambda: silu_mul.silu_mul(gate_up, h, EPS),
                                             equal_to(silu_mul_reference(gate_up, h, EPS)))


def test_import_failure_is_recorded(fresh_dispatcher, caplog):
    gate_up = _make((2, 256), torch.float32, seed=4)
    check_import_failure_is_recorded(fresh_dispatcher, caplog, silu_mul, lambda: silu_mul.silu_mul(gate_up),
                                     equal_to(silu_mul_reference(gate_up)))


def test_real_launch_failure_falls_back(fresh_dispatcher):
    from kernels import silu_mul_triton

    gate_up = _make((2, 2048), torch.bfloat16, seed=5)
    check_real_launch_failure_falls_back(fresh_dispatcher, silu_mul, silu_mul_triton, lambda: silu_mul.silu_mul(gate_up),
                                         equal_to(silu_mul_reference(gate_up)))


@pytest.mark.parametrize("shape", [(), (3, 7)])
def test_bad_arguments_raise_value_error(fresh_dispatcher, shape):
    with pytest.raises(ValueError, match=r"gate_up \[\.\.\., 2\*I\]"):
        silu_mul.silu_mul(torch.zeros(shape))
    assert silu_mul.triton_failure() is None, "bad input must not disable the kernel"


def _norm_error_cases():
    """(id, gate_up, norm_source, pattern of the ValueError message)."""
    gate_up = torch.zeros(3, 5, 512, dtype=torch.bfloat16)
    return [
        ("leading-dims", gate_up, torch.zeros(3, 4, 1024, dtype=torch.bfloat16), r"leading dims \(3, 5\)"),
        ("rows-flattened", gate_up, torch.zeros(15, 1024, dtype=torch.bfloat16), r"leading dims \(3, 5\)"),
        ("scalar", gate_up, torch.zeros((), dtype=torch.bfloat16), r"norm_source must be \[\.\.\., H\]"),
        ("no-columns", gate_up, torch.zeros(3, 5, 0, dtype=torch.bfloat16), r"H >= 1"),
        ("dtype", gate_up, torch.zeros(3, 5, 1024), r"dtype must be gate_up's \(torch.bfloat16\), got torch.float32"),
        ("device", gate_up, torch.zeros(3, 5, 1024, dtype=torch.bfloat16, device="meta"),
         r"on gate_up's device \(cpu\), got meta"),
    ]


@pytest.mark.parametrize("gate_up, norm_source, pattern", [c[1:] for c in _norm_error_cases()],
                         ids=[c[0] for c in _norm_error_cases()])
def test_bad_norm_source_raises_value_error(fresh_dispatcher, gate_up, norm_source, pattern):
    """Checked before the op (so also on the grad path), never recorded as a Triton failure."""
    with pytest.raises(ValueError, match=pattern):
        silu_mul.silu_mul(gate_up, norm_source, EPS)
    with pytest.raises(ValueError, match=pattern):
        silu_mul.silu_mul(gate_up.clone().requires_grad_(True), norm_source, EPS)
    assert silu_mul.triton_failure() is None, "bad input must not disable the kernel"
