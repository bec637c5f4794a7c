"""The cache-writing fused QK-norm + RoPE's op and dispatcher (qk_norm_rope_write_kv), in process
with stand-in launchers (no interpreter child): on CPU by default the reference, bit for bit what the
talker's and the predictor's stores wrote before, without touching Triton; the launcher when forced,
with unsupported inputs routed to the reference; eager on the grad path; a Triton failure logged once
and remembered; bad arguments rejected without recording one; one op under dispatch mode whose fake
matches the real one. The same for its deferred input norm (norm_source). The kernel itself (CPU
interpreter and GPU) and the model's stores on it: tests/test_qk_norm_rope_write_kv.py.
"""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

# triton_support first: it puts the repo root on sys.path for the kernels imports below
from triton_support import (CountingLauncher, OpCounter, check_failure_logged_once_and_remembered,
                            check_real_launch_failure_falls_back, forbid_triton, fresh_route, use_launcher)
import kernels.qk_norm_rope as qkr
from kernels.qk_norm_rope_reference import qk_norm_rope_write_kv_reference
from qk_norm_rope_cases import (CACHE_LAYERS, DTYPES, EPS, SENTINEL, TARGET_LAYER, WRITE_SHAPES, _assert_write_equal,
                                _expected_write, _make_case, _norm_reference, _run_write, _write_case)


# ---------------------------------------------------------------------------------------------
# The cache-writing op's routing, checks and registration, in process

# The write op's route, shaped like a dispatcher module for the shared routing checks
WRITE_KV_DISPATCHER = SimpleNamespace(
    __name__=qkr.__name__, _route=qkr._write_kv_route, CPU_TRITON_ENV=qkr.CPU_TRITON_ENV,
    triton_failure=qkr.write_kv_triton_failure, reset_triton_failure=qkr.reset_write_kv_triton_failure)


@pytest.fixture
def fresh_write_dispatcher(monkeypatch):
    fresh_route(monkeypatch, qkr)
    return fresh_route(monkeypatch, WRITE_KV_DISPATCHER)


def _small_write_case(dtype=torch.float32, seed=11):
    """A small talker-decode-like case: B=2, L=1, H=4, KV=2, D=32, cache [S=3, 2, P=5, 32]."""
    args = _make_case((2, 1, 4, 2, 32), dtype, seed, with_v=True)
    stack = torch.full((CACHE_LAYERS, 3, 2, 5, 32), SENTINEL, dtype=dtype)
    return args, stack, stack.clone(), torch.tensor([2, 0]), torch.tensor([4, 1])


def _write_stand_in():
    def result(*args):
        return (qk_norm_rope_write_kv_reference(*args) + 1).contiguous()  # distinguishable from eager
    return CountingLauncher(result)


def _old_decode_writes(case):
    """What Attention.forward + SlotDecodeView.attend did before the fused write, op for op."""
    (q, k, v, qw, kw, cos, sin), k_stack, v_stack, slots, positions = case
    k_stack, v_stack = k_stack.clone(), v_stack.clone()
    q_out, k_out = qkr.qk_norm_rope(q, k, qw, kw, cos, sin, EPS)
    v = v.transpose(1, 2)
    k_layer, v_layer = k_stack[TARGET_LAYER], v_stack[TARGET_LAYER]
    k_layer[slots, :, positions] = k_out[:, :, 0]
    v_layer[slots, :, positions] = v[:, :, 0]
    return q_out, k_stack, v_stack


def _old_frame_writes(case, offset):
    """What Attention.forward + FrameKVCache.update did before the fused write, op for op."""
    (q, k, v, qw, kw, cos, sin), k_stack, v_stack, _, _ = case
    k_stack, v_stack = k_stack.clone(), v_stack.clone()
    q_out, k_out = qkr.qk_norm_rope(q, k, qw, kw, cos, sin, EPS)
    end = offset + k_out.shape[2]
    k_stack[TARGET_LAYER, :, :, offset:end] = k_out
    v_stack[TARGET_LAYER, :, :, offset:end] = v.transpose(1, 2)
    return q_out, k_stack, v_stack


@pytest.mark.parametrize("dname", ["fp32", "bf16"])
def test_write_kv_on_cpu_is_the_old_decode_path_without_touching_triton(fresh_write_dispatcher, dname):
    """CPU, no env var: the reference, bit for bit what the talker's and the predictor's stores
    wrote before, and no Triton import."""
    forbid_triton(fresh_write_dispatcher, WRITE_KV_DISPATCHER)
    forbid_triton(fresh_write_dispatcher, qkr)
    for shape_name in ("talker", "predictor_l1", "predictor_l2"):
        case = _write_case(shape_name, DTYPES[dname], seed=140, exact_var=False)
        got = _run_write(qkr.qk_norm_rope_write_kv, case)
        offset = WRITE_SHAPES[shape_name][3]
        want = _old_decode_writes(case) if shape_name == "talker" else _old_frame_writes(case, offset)
        _assert_write_equal(got, want, shape_name)


def test_write_kv_forced_cpu_path_calls_launcher_and_routes_unsupported_inputs(fresh_write_dispatcher):
    launcher = use_launcher(fresh_write_dispatcher, WRITE_KV_DISPATCHER, _write_stand_in())
    case = _small_write_case()
    got = _run_write(qkr.qk_norm_rope_write_kv, case)
    want = _run_write(qk_norm_rope_write_kv_reference, case)
    assert torch.equal(got[0], want[0] + 1) and launcher.num_calls == 1
    (q, k, v, qw, kw, cos, sin), k_stack, v_stack, rows, positions = case
    half_d = torch.full((*k_stack.shape[:-1], 2 * k_stack.shape[-1]), SENTINEL)[..., ::2]  # head_dim stride 2
    unsupported = {
        "fp64": ((*(t.double() for t in case[0]),), k_stack.double(), v_stack.double(), rows, positions),
        "bf16 caches, fp32 activations": (case[0], k_stack.bfloat16(), v_stack.bfloat16(), rows, positions),
        "bf16 v": ((q, k, v.bfloat16(), qw, kw, cos, sin), k_stack, v_stack, rows, positions),
        "cache head_dim not contiguous": (case[0], half_d, half_d.clone(), rows, positions),
        "head_dim 24": (_make_case((2, 1, 2, 1, 24), torch.float32, seed=12, with_v=True),
                        torch.zeros(CACHE_LAYERS, 3, 1, 5, 24), torch.zeros(CACHE_LAYERS, 3, 1, 5, 24), rows, positions),
    }
    for what, ucase in unsupported.items():
        _assert_write_equal(_run_write(qkr.qk_norm_rope_write_kv, ucase),
                            _run_write(qk_norm_rope_write_kv_reference, ucase), what)
    assert launcher.num_calls == 1, "unsupported inputs must not reach the launcher"
    assert qkr.write_kv_triton_failure() is None


def test_write_kv_grad_path_uses_eager_and_backprops(fresh_write_dispatcher):
    launcher = use_launcher(fresh_write_dispatcher, WRITE_KV_DISPATCHER, _write_stand_in())
    (q, k, v, qw, kw, cos, sin), k_stack, v_stack, rows, positions = _small_write_case(seed=13)
    qw = qw.clone().requires_grad_(True)
    q_out = qkr.qk_norm_rope_write_kv(q, k, v, qw, kw, cos, sin, EPS, k_stack[1], v_stack[1], rows, positions)
    assert launcher.num_calls == 0 and q_out.requires_grad
    q_out.sum().backward()
    assert qw.grad is not None and torch.isfinite(qw.grad).all()


def test_write_kv_failure_is_logged_once_and_never_retried(fresh_write_dispatcher, caplog):
    case = _small_write_case(torch.bfloat16, seed=14)
    want = _run_write(qk_norm_rope_write_kv_reference, case)
    check_failure_logged_once_and_remembered(
        fresh_write_dispatcher, caplog, WRITE_KV_DISPATCHER, lambda: _run_write(qkr.qk_norm_rope_write_kv, case),
        lambda got: _assert_write_equal(got, want, "fallback"))
    assert qkr.triton_failure() is None, "the plain op keeps its kernel"


def test_write_kv_real_launch_failure_falls_back(fresh_write_dispatcher):
    from kernels import qk_norm_rope_triton

    case = _small_write_case(torch.bfloat16, seed=15)
    want = _run_write(qk_norm_rope_write_kv_reference, case)
    check_real_launch_failure_falls_back(fresh_write_dispatcher, WRITE_KV_DISPATCHER, qk_norm_rope_triton,
                                         lambda: _run_write(qkr.qk_norm_rope_write_kv, case),
                                         lambda got: _assert_write_equal(got, want, "fallback"))


@pytest.mark.parametrize("bad, match", [
    (lambda a, ks, vs, r, p: ((a[0], a[1], a[2][:, :, :1], *a[3:]), ks, vs, r, p), r"v \(2, 1, 1, 32\) must have k's shape"),
    (lambda a, ks, vs, r, p: (a, ks[:, :, :1], vs[:, :, :1], r, p), r"caches \[S, 2, P, 32\]"),
    (lambda a, ks, vs, r, p: (a, ks, vs[:, :2], r, p), r"caches \[S, 2, P, 32\] of one shape"),
    (lambda a, ks, vs, r, p: (a, ks, vs, r[:1], p), r"dest_rows must be int64/int32 \[2\]"),
    (lambda a, ks, vs, r, p: (a, ks, vs, r, p.float()), r"dest_positions must be int64/int32 \[2\]"),
])
def test_write_kv_bad_arguments_raise_value_error(fresh_write_dispatcher, bad, match):
    with pytest.raises(ValueError, match=match):
        _run_write(qkr.qk_norm_rope_write_kv, bad(*_small_write_case(seed=16)))
    assert qkr.write_kv_triton_failure() is None, "bad input must not disable the kernel"


def test_write_kv_is_one_op_under_dispatch_mode(fresh_write_dispatcher):
    case = _small_write_case(torch.bfloat16, seed=17)
    (q, k, v, qw, kw, cos, sin), k_stack, v_stack, rows, positions = case
    k_stack, v_stack = k_stack.clone(), v_stack.clone()
    k_cache, v_cache = k_stack[TARGET_LAYER], v_stack[TARGET_LAYER]
    with torch.no_grad(), OpCounter() as counter:
        q_out = qkr.qk_norm_rope_write_kv(q, k, v, qw, kw, cos, sin, EPS, k_cache, v_cache, rows, positions)
    assert counter.ops == ["qwen3tts.qk_norm_rope_write_kv.default"]
    _assert_write_equal((q_out, k_stack, v_stack), _expected_write(case), "op")


def test_write_kv_fake_matches_real():
    """The schema declares both caches mutated; the fake's q_out matches the real one."""
    (q, k, v, qw, kw, cos, sin), k_stack, v_stack, rows, positions = _small_write_case(torch.bfloat16, seed=18)
    for weights in ((qw, kw), (qw.float(), kw.float())):   # fp32 weights promote q_out, like the reference
        torch.library.opcheck(qkr.qk_norm_rope_write_kv_op,
                              (q, k, v, *weights, cos, sin, EPS, k_stack[1], v_stack[1], rows, positions),
                              test_utils=("test_schema", "test_faketensor"))


# ---------------------------------------------------------------------------------------------
# The deferred input norm (norm_source): routing, checks and the op, in process


def _small_norm_case(dtype=torch.float32, seed=21, width=64):
    """_small_write_case with a Gaussian norm_source [2, 1, width]."""
    gen = torch.Generator().manual_seed(seed)
    return _small_write_case(dtype, seed), (torch.randn(2, 1, width, generator=gen) * 3).to(dtype)


@pytest.mark.parametrize("dname", ["fp32", "bf16"])
def test_write_kv_norm_on_cpu_uses_the_reference_without_touching_triton(fresh_write_dispatcher, dname):
    forbid_triton(fresh_write_dispatcher, WRITE_KV_DISPATCHER)
    case, norm_source = _small_norm_case(DTYPES[dname])
    got = _run_write(qkr.qk_norm_rope_write_kv, case, norm=(norm_source, EPS))
    _assert_write_equal(got, _norm_reference(case, norm_source), dname)
    assert not torch.equal(got[0], _run_write(qk_norm_rope_write_kv_reference, case)[0]), "norm_source was ignored"


def test_write_kv_norm_forced_cpu_path_passes_it_to_the_launcher(fresh_write_dispatcher):
    """The launcher gets norm_source and norm_eps after the destinations (None and 0.0 without); a
    norm_source wider than the kernel's 8192 goes to the reference without reaching it."""
    seen = []

    def result(*args):
        seen.append(args[12:])
        return (qk_norm_rope_write_kv_reference(*args) + 1).contiguous()

    launcher = use_launcher(fresh_write_dispatcher, WRITE_KV_DISPATCHER, CountingLauncher(result))
    case, norm_source = _small_norm_case()
    got = _run_write(qkr.qk_norm_rope_write_kv, case, norm=(norm_source, 0.5))
    assert torch.equal(got[0], _run_write(qk_norm_rope_write_kv_reference, case, norm=(norm_source, 0.5))[0] + 1)
    _run_write(qkr.qk_norm_rope_write_kv, case)
    assert launcher.num_calls == 2 and seen[0][0] is norm_source and seen[0][1] == 0.5 and seen[1] == (None, 0.0)
    wide_case, wide = _small_norm_case(width=qkr.MAX_NORM_COLS + 4)
    _assert_write_equal(_run_write(qkr.qk_norm_rope_write_kv, wide_case, norm=(wide, EPS)),
                        _norm_reference(wide_case, wide), "wide norm_source")
    assert launcher.num_calls == 2, "a norm_source wider than 8192 must not reach the launcher"
    assert qkr.write_kv_triton_failure() is None


def test_write_kv_norm_failure_is_logged_once_and_never_retried(fresh_write_dispatcher, caplog):
    case, norm_source = _small_norm_case(torch.bfloat16, seed=22)
    want = _norm_reference(case, norm_source)
    check_failure_logged_once_and_remembered(
        fresh_write_dispatcher, caplog, WRITE_KV_DISPATCHER,
        lambda: _run_write(qkr.qk_norm_rope_write_kv, case, norm=(norm_source, EPS)),
        lambda got: _assert_write_equal(got, want, "fallback"))


def test_write_kv_norm_real_launch_failure_falls_back(fresh_write_dispatcher):
    from kernels import qk_norm_rope_triton

    case, norm_source = _small_norm_case(torch.bfloat16, seed=23)
    want = _norm_reference(case, norm_source)
    check_real_launch_failure_falls_back(fresh_write_dispatcher, WRITE_KV_DISPATCHER, qk_norm_rope_triton,
                                         lambda: _run_write(qkr.qk_norm_rope_write_kv, case, norm=(norm_source, EPS)),
                                         lambda got: _assert_write_equal(got, want, "fallback"))


def test_write_kv_norm_grad_path_uses_eager_and_backprops(fresh_write_dispatcher):
    """A norm_source that needs a gradient takes the eager reference, and the gradient reaches it."""
    launcher = use_launcher(fresh_write_dispatcher, WRITE_KV_DISPATCHER, _write_stand_in())
    ((q, k, v, qw, kw, cos, sin), k_stack, v_stack, rows, positions), norm_source = _small_norm_case(seed=24)
    norm_source = norm_source.clone().requires_grad_(True)
    q_out = qkr.qk_norm_rope_write_kv(q, k, v, qw, kw, cos, sin, EPS, k_stack[1], v_stack[1], rows, positions,
                                      norm_source, EPS)
    assert launcher.num_calls == 0 and q_out.requires_grad
    (q_out * torch.linspace(-1, 1, q_out.numel()).view(q_out.shape)).sum().backward()
    assert norm_source.grad is not None and torch.isfinite(norm_source.grad).all() and norm_source.grad.abs().sum() > 0


@pytest.mark.parametrize("bad, match", [
    (lambda ns: ns[:1], r"norm_source must be \[2, 1, H_model\] \(q's B and L, H_model >= 1\), got \(1, 1, 64\)"),
    (lambda ns: ns.expand(2, 3, 64), r"norm_source must be \[2, 1, H_model\].*got \(2, 3, 64\)"),
    (lambda ns: ns[:, 0], r"norm_source must be \[2, 1, H_model\].*got \(2, 64\)"),
    (lambda ns: ns[..., :0], r"norm_source must be \[2, 1, H_model\].*got \(2, 1, 0\)"),
    (lambda ns: ns.double(), r"norm_source's dtype must be q's \(torch.float32\), got torch.float64"),
    (lambda ns: ns.to("meta"), r"norm_source is on meta but q is on cpu"),
])
def test_write_kv_norm_bad_arguments_raise_value_error(fresh_write_dispatcher, bad, match):
    case, norm_source = _small_norm_case(seed=25)
    with pytest.raises(ValueError, match=match):
        _run_write(qkr.qk_norm_rope_write_kv, case, norm=(bad(norm_source), EPS))
    assert qkr.write_kv_triton_failure() is None, "bad input must not disable the kernel"


def test_write_kv_norm_is_one_op_under_dispatch_mode(fresh_write_dispatcher):
    case, norm_source = _small_norm_case(torch.bfloat16, seed=26)
    (q, k, v, qw, kw, cos, sin), k_stack, v_stack, rows, positions = case
    k_stack, v_stack = k_stack.clone(), v_stack.clone()
    k_cache, v_cache = k_stack[TARGET_LAYER], v_stack[TARGET_LAYER]
    with torch.no_grad(), OpCounter() as counter:
        q_out = qkr.qk_norm_rope_write_kv(q, k, v, qw, kw, cos, sin, EPS, k_cache, v_cache, rows, positions,
                                          norm_source, EPS)
    assert counter.ops == ["qwen3tts.qk_norm_rope_write_kv.default"]
    _assert_write_equal((q_out, k_stack, v_stack), _norm_reference(case, norm_source), "op")


def test_write_kv_norm_fake_matches_real():
    (q, k, v, qw, kw, cos, sin), k_stack, v_stack, rows, positions = _small_write_case(torch.bfloat16, seed=27)
    norm_source = torch.randn(2, 1, 48).bfloat16()
    torch.library.opcheck(qkr.qk_norm_rope_write_kv_op,
                          (q, k, v, qw, kw, cos, sin, EPS, k_stack[1], v_stack[1], rows, positions, norm_source, EPS),
                          test_utils=("test_schema", "test_faketensor"))

