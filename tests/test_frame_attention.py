"""Frame attention (the code predictor's one-query step in one launch): the Triton kernel (CPU
interpreter) against the two references it fuses, the reference against today's predictor path,
the qwen3tts::frame_attention op, routing and fallbacks, and an sm_90 compile.

As in tests/test_qk_norm_rope_write_kv.py, every kernel launch happens in ONE child process started
with TRITON_INTERPRET=1 (`python tests/test_frame_attention.py --child DIR`); the child rebuilds the
same seeded cases, runs the kernel and the dispatcher, and the parent compares.

What is held to what:
- q (the kernel's rounded q, written to a test-only q_out) and both caches: bit for bit the
  reference's (qk_norm_rope_write_kv_reference), for inputs whose variance is exact in fp32
  (tests/qk_norm_rope_cases.py's exact_var); for Gaussian inputs bit for bit the existing
  qk_norm_rope_write_kv kernel's. The caches are compared as bits across three layers (the target is
  the middle one) and every row, so a stray write anywhere shows.
- the attention: tests/test_slot_attention.py's tolerances against slot_decode_attention_reference
  of the reference's q over the reference-written cache (fp32: 1e-5; bf16/fp16: 2e-2 * max|ref|, and
  half an ulp of fp64 attention of the same inputs: the kernel computes in fp32 and rounds once).
- cache positions from the query's position on hold NaN (the stale keys of an earlier frame): the
  output must be finite, and bit for bit the same as with those positions holding 1e4 instead.
"""
from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest
import torch

# triton_support first: it puts the repo root on sys.path for the kernels imports below
from triton_support import (CountingLauncher, OpCounter, assert_dispatcher_took_triton,
                            check_failure_logged_once_and_remembered, check_import_failure_is_recorded,
                            check_real_launch_failure_falls_back, child_main, compile_for_hopper, forbid_triton,
                            fresh_route, run_interpreter_child, save_child_results, skip_if_interpreting,
                            use_launcher)
from kernels import frame_attention as fa
from kernels.frame_attention_reference import frame_attention_reference
from kernels.qk_norm_rope_reference import qk_norm_rope_write_kv_reference
from kernels.slot_attention_reference import slot_decode_attention_reference
from qk_norm_rope_cases import DTYPES, EPS, _make_case

OP_NAME = "qwen3tts.frame_attention"
LAYERS, TARGET = 3, 1  # cache stacks of 3 layers; the op writes the middle one
FRAME_POSITIONS = 16   # the predictor's frame cache
GARBAGE = 1e4          # the finite stand-in for the NaN garbage: must change nothing
HALF_ULP = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}
_INT_VIEW = {torch.float64: torch.int64, torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}
# (H, KV, D): the predictor's 16/8 at D = 128 (1.7B and 0.6B), one query head per kv head, one kv head
LAYOUTS = {"h16kv8d128": (16, 8, 128), "h8kv8d64": (8, 8, 64), "h4kv1d64": (4, 1, 64)}


def _case(dtype, batch, layout, positions, seed, *, num_positions=FRAME_POSITIONS, extra_rows=0, exact=True,
          index_dtype=torch.int64):
    """q/k/v as views of one fused projection, cos/sin gathered per row, position an expanded scalar
    (int) or per-row values (list); stacks [LAYERS, B + extra_rows, KV, P, D] holding earlier steps'
    keys before each row's position and NaN from it on (the target layer's rows < B)."""
    num_heads, num_kv, head_dim = layout
    args = _make_case((batch, 1, num_heads, num_kv, head_dim), dtype, seed, exact_var=exact, with_v=True)
    gen = torch.Generator().manual_seed(seed + 1000)
    shape = (LAYERS, batch + extra_rows, num_kv, num_positions, head_dim)
    k_stack = torch.randn(shape, generator=gen).to(dtype)
    v_stack = torch.randn(shape, generator=gen).to(dtype)
    if isinstance(positions, int):
        position = torch.tensor(positions, dtype=index_dtype).expand(batch)  # as FrameKVCache passes it
    else:
        position = torch.tensor(positions, dtype=index_dtype)
    for b in range(batch):
        start = max(0, int(position[b]))
        k_stack[TARGET, b, :, start:] = float("nan")
        v_stack[TARGET, b, :, start:] = float("nan")
    return {"args": args, "k": k_stack, "v": v_stack, "position": position, "scale": head_dim ** -0.5}


@functools.lru_cache(maxsize=None)
def _cases():
    cases = {}
    for dname, dtype in DTYPES.items():
        for lname, layout in LAYOUTS.items():
            for p in (0, 1, 7, 15):
                cases[f"{dname}-b3-{lname}-p{p}"] = _case(dtype, 3, layout, p, seed=len(cases))
    cases["bf16-b1-h16kv8d128-p15"] = _case(torch.bfloat16, 1, LAYOUTS["h16kv8d128"], 15, seed=100)
    cases["fp16-b1-h16kv8d128-p1"] = _case(torch.float16, 1, LAYOUTS["h16kv8d128"], 1, seed=101)
    cases["fp32-b1-h4kv1d64-p0"] = _case(torch.float32, 1, LAYOUTS["h4kv1d64"], 0, seed=102)
    cases["bf16-b64-h16kv8d128-p9"] = _case(torch.bfloat16, 64, LAYOUTS["h16kv8d128"], 9, seed=103)
    cases["fp32-b64-h4kv1d64-p7"] = _case(torch.float32, 64, LAYOUTS["h4kv1d64"], 7, seed=104)
    # a group of 3 (padded to 4 rows); per-row positions in int32 with spare cache rows; the
    # smallest and the largest cache the kernel takes in one tile, at their last position
    cases["fp32-b3-h6kv2d32-p9"] = _case(torch.float32, 3, (6, 2, 32), 9, seed=105)
    cases["bf16-b3-h6kv2d32-p9"] = _case(torch.bfloat16, 3, (6, 2, 32), 9, seed=106)
    cases["bf16-b3-h16kv8d128-rows"] = _case(torch.bfloat16, 3, LAYOUTS["h16kv8d128"], [0, 15, 6], seed=107,
                                             extra_rows=2, index_dtype=torch.int32)
    cases["fp32-b2-h4kv2d16-P1-p0"] = _case(torch.float32, 2, (4, 2, 16), 0, seed=108, num_positions=1)
    cases["bf16-b2-h4kv2d256-P32-p31"] = _case(torch.bfloat16, 2, (4, 2, 256), 31, seed=109, num_positions=32)
    for dname in ("fp32", "bf16"):  # Gaussian q/k: held to the existing write_kv kernel's bits
        cases[f"{dname}-b3-h16kv8d128-p7-randn"] = _case(DTYPES[dname], 3, LAYOUTS["h16kv8d128"], 7, seed=110,
                                                         exact=False)
    return cases


EXACT = [name for name in _cases() if not name.endswith("randn")]
RANDN = [name for name in _cases() if name.endswith("randn")]
GARBAGE_CASES = ["fp32-b3-h16kv8d128-p7", "bf16-b3-h16kv8d128-p1", "fp16-b3-h4kv1d64-p15",
                 "bf16-b3-h16kv8d128-rows"]
DISPATCH_CASES = ["fp32-b3-h16kv8d128-p7", "bf16-b3-h16kv8d128-p15", "fp16-b3-h8kv8d64-p1", "bf16-b3-h16kv8d128-rows"]
OUT_OF_RANGE = [16, -1, 3]  # rows 0 and 1 outside the 16-position cache: only row 2 is written


def _run(fn, case, garbage=None, **kwargs):
    """fn (kernel, dispatcher or reference) on fresh copies of the case's stacks -> (out, k_stack, v_stack)."""
    k_stack, v_stack = _copy_strided(case["k"]), _copy_strided(case["v"])
    if garbage is not None:
        k_stack, v_stack = k_stack.nan_to_num(nan=garbage), v_stack.nan_to_num(nan=garbage)
    q, k, v, qw, kw, cos, sin = case["args"]
    out = fn(q, k, v, qw, kw, cos, sin, EPS, k_stack[TARGET], v_stack[TARGET], case["position"], case["scale"],
             **kwargs)
    return out, k_stack, v_stack


def _copy_strided(t):
    """A copy with t's strides (clone() makes non-dense tensors, e.g. a head_dim-strided cache, contiguous)."""
    storage_size = 1 + sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))
    return torch.empty(storage_size, dtype=t.dtype).as_strided(t.shape, t.stride()).copy_(t)


def _run_write_kv(fn, case):
    """qk_norm_rope_write_kv (reference or kernel) on fresh copies -> (q [B, H, D], k_stack, v_stack)."""
    k_stack, v_stack = case["k"].clone(), case["v"].clone()
    q, k, v, qw, kw, cos, sin = case["args"]
    rows = torch.arange(q.shape[0])
    q_out = fn(q, k, v, qw, kw, cos, sin, EPS, k_stack[TARGET], v_stack[TARGET], rows, case["position"])
    return q_out[:, :, 0], k_stack, v_stack


def _bits(t):
    return t.view(_INT_VIEW[t.dtype])


def _assert_bits_equal(got, want, what):
    assert got.shape == want.shape and got.dtype == want.dtype, f"{what}: {got.shape} {got.dtype} vs {want.shape} {want.dtype}"
    differ = _bits(got) != _bits(want)
    assert not differ.any(), f"{what}: {int(differ.sum())} of {got.numel()} elements differ"


def _expected_attention(case):
    """slot_decode_attention_reference of the reference's q over the reference-written cache, the
    garbage made finite (the reference gathers every position and masks; NaN would poison it), and
    the same in fp64 (the truth the bf16/fp16 outputs are held to within half an ulp)."""
    q_ref, k_stack, v_stack = _run_write_kv(qk_norm_rope_write_kv_reference, case)
    k_layer, v_layer = k_stack[TARGET].nan_to_num(nan=0.0), v_stack[TARGET].nan_to_num(nan=0.0)
    rows, lengths = torch.arange(q_ref.shape[0]), case["position"] + 1
    ref = slot_decode_attention_reference(q_ref, k_layer, v_layer, rows, lengths, case["scale"])
    truth = slot_decode_attention_reference(q_ref.double(), k_layer.double(), v_layer.double(), rows, lengths,
                                            case["scale"])
    return ref, truth


def _assert_attention_close(out, case):
    ref, truth = _expected_attention(case)
    assert out.shape == ref.shape and out.dtype == ref.dtype and out.is_contiguous()
    assert torch.isfinite(out).all(), "non-finite output: a stale (NaN) cache position was read"
    if out.dtype == torch.float32:
        torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
        return
    err = (out.float() - ref.float()).abs().max().item()
    assert err <= 2e-2 * ref.float().abs().max().item(), err
    bound = HALF_ULP[out.dtype] * truth.abs() + 1e-5
    assert bool(((out.double() - truth).abs() <= bound).all()), "more than half an ulp off fp64 attention"


# ---------------------------------------------------------------------------------------------
# Kernel under the Triton interpreter (child process)


@pytest.fixture(scope="module")
def interpreted(tmp_path_factory):
    work_dir = tmp_path_factory.mktemp("frame_attention_interp")
    info = run_interpreter_child(__file__, work_dir, fa.CPU_TRITON_ENV, timeout=600)
    assert info["is_interpreting"], "the child must run the Triton interpreter, not a GPU kernel"
    return torch.load(work_dir / "outputs.pt"), info


@pytest.mark.parametrize("name", EXACT)
def test_kernel_q_and_caches_are_the_references_bits(interpreted, name):
    outputs, _ = interpreted
    case = _cases()[name]
    _, k_stack, v_stack, q_out = outputs[f"kernel/{name}"]
    want_q, want_k, want_v = _run_write_kv(qk_norm_rope_write_kv_reference, case)
    _assert_bits_equal(q_out, want_q, f"{name}: q")
    _assert_bits_equal(k_stack, want_k, f"{name}: k cache")
    _assert_bits_equal(v_stack, want_v, f"{name}: v cache")


@pytest.mark.parametrize("name", EXACT + RANDN)
def test_kernel_attention_matches_the_reference(interpreted, name):
    outputs, _ = interpreted
    _assert_attention_close(outputs[f"kernel/{name}"][0], _cases()[name])


@pytest.mark.parametrize("name", RANDN)
def test_kernel_q_and_caches_are_the_write_kv_kernels_bits(interpreted, name):
    """Gaussian inputs, where the summation order may move the variance by an fp32 ulp: the same
    bits as the existing qk_norm_rope_write_kv kernel (same arithmetic, same reduction)."""
    outputs, _ = interpreted
    _, k_stack, v_stack, q_out = outputs[f"kernel/{name}"]
    want_q, want_k, want_v = outputs[f"write_kv/{name}"]
    _assert_bits_equal(q_out, want_q, f"{name}: q")
    _assert_bits_equal(k_stack, want_k, f"{name}: k cache")
    _assert_bits_equal(v_stack, want_v, f"{name}: v cache")


@pytest.mark.parametrize("name", GARBAGE_CASES)
def test_positions_from_the_query_on_are_never_read(interpreted, name):
    """The stale positions (NaN here, 1e4 there) change no bit of the output, and each row's write
    lands over its own position's NaN, leaving the later ones NaN."""
    outputs, _ = interpreted
    case = _cases()[name]
    nan_out, nan_k, _, _ = outputs[f"kernel/{name}"]
    big_out, big_k, _ = outputs[f"garbage/{name}"]
    assert torch.isfinite(nan_out).all()
    _assert_bits_equal(nan_out, big_out, f"{name}: output")
    for b, p in enumerate(case["position"].tolist()):
        assert torch.isfinite(nan_k[TARGET, b, :, : p + 1]).all() and torch.isnan(nan_k[TARGET, b, :, p + 1:]).all()
        assert (big_k[TARGET, b, :, p + 1:] == torch.tensor(GARBAGE, dtype=big_k.dtype)).all()


def test_position_is_read_per_row_and_as_an_expanded_scalar():
    cases = _cases()
    assert cases["bf16-b64-h16kv8d128-p9"]["position"].stride(0) == 0
    assert cases["bf16-b3-h16kv8d128-rows"]["position"].stride(0) == 1
    assert cases["bf16-b3-h16kv8d128-rows"]["position"].dtype == torch.int32


def test_positions_outside_the_cache_write_nothing(interpreted):
    """Out of contract (positions must lie in [0, P)): rows at P and at -1 write nowhere, the row in
    range writes its position; every output is finite (no read outside the cache)."""
    outputs, _ = interpreted
    case = _out_of_range_case()
    out, k_stack, v_stack = outputs["out_of_range"]
    assert torch.isfinite(out).all()
    for got, before in ((k_stack, case["k"]), (v_stack, case["v"])):
        changed = (_bits(got) != _bits(before)).any(dim=-1)  # [LAYERS, S, KV, P]
        assert changed.sum() == changed[TARGET, 2, :, 3].sum() == got.shape[2], "only row 2, position 3"


def _out_of_range_case():
    return _case(torch.float32, 3, (4, 2, 32), OUT_OF_RANGE, seed=120)


@pytest.mark.parametrize("name", DISPATCH_CASES)
def test_dispatcher_uses_triton_when_forced(interpreted, name):
    """The op on the forced CPU Triton route returns the kernel's output and leaves its caches."""
    outputs, info = interpreted
    assert_dispatcher_took_triton(info)
    _assert_same_run(outputs[f"dispatch/{name}"], outputs[f"kernel/{name}"][:3], name)


def test_op_is_one_dispatch_on_triton_path(interpreted):
    _, info = interpreted
    assert info["triton_path_op_counts"] == {OP_NAME: 1}


# ---------------------------------------------------------------------------------------------
# The reference is today's predictor step


@pytest.mark.parametrize("dname", ["fp32", "bf16"])
def test_reference_is_todays_predictor_step(dname):
    """qk_norm_rope_write_kv into FrameKVCache's write target, then FrameKVCache.attend (the two ops
    Attention.forward runs for a one-query predictor step, CPU reference route): the same output
    and caches, bit for bit."""
    from kernels.qk_norm_rope import qk_norm_rope_write_kv
    from talker_service.model.kv_cache import FrameKVCache

    num_heads, num_kv, head_dim = LAYOUTS["h16kv8d128"]
    for offset in (1, 9, 15):
        case = _case(DTYPES[dname], 3, LAYOUTS["h16kv8d128"], offset, seed=130 + offset)
        frame = FrameKVCache(LAYERS, 3, num_kv, FRAME_POSITIONS, head_dim, DTYPES[dname], "cpu")
        frame.k.copy_(case["k"].nan_to_num(nan=0.0))  # SDPA over the gathered prefix: no NaN
        frame.v.copy_(case["v"].nan_to_num(nan=0.0))
        frame.offset = offset
        q, k, v, qw, kw, cos, sin = case["args"]
        q_out = qk_norm_rope_write_kv(q, k, v, qw, kw, cos, sin, EPS, *frame.write_target(TARGET))
        today = frame.attend(TARGET, q_out, None)[:, :, 0]
        clean = dict(case, k=case["k"].nan_to_num(nan=0.0), v=case["v"].nan_to_num(nan=0.0))
        got, k_stack, v_stack = _run(frame_attention_reference, clean)
        _assert_bits_equal(got, today, f"offset {offset}: output")
        _assert_bits_equal(k_stack, frame.k, f"offset {offset}: k cache")
        _assert_bits_equal(v_stack, frame.v, f"offset {offset}: v cache")


# ---------------------------------------------------------------------------------------------
# Op registration and dispatcher routing (in-process, stand-in launchers)


@pytest.fixture
def fresh_dispatcher(monkeypatch):
    return fresh_route(monkeypatch, fa)


def _small(dtype=torch.float32, seed=7):
    """B=2, H=4, KV=2, D=32, a 16-position cache, position 5 for both rows; finite garbage."""
    case = _case(dtype, 2, (4, 2, 32), 5, seed=seed)
    return dict(case, k=case["k"].nan_to_num(nan=0.0), v=case["v"].nan_to_num(nan=0.0))


def _stand_in():
    return CountingLauncher(lambda *args: frame_attention_reference(*args) + 1.0)  # distinguishable from eager


def _assert_same_run(got, want, what):
    for part, g, w in zip(("output", "k cache", "v cache"), got, want):
        _assert_bits_equal(g, w, f"{what}: {part}")


def test_cpu_default_uses_reference_without_touching_triton(fresh_dispatcher):
    forbid_triton(fresh_dispatcher, fa)
    for dtype in (torch.float32, torch.bfloat16):
        case = _small(dtype)
        got = _run(fa.frame_attention, case)
        assert got[0].is_contiguous()
        _assert_same_run(got, _run(frame_attention_reference, case), str(dtype))


def test_forced_cpu_path_calls_launcher_and_routes_unsupported_inputs(fresh_dispatcher):
    launcher = use_launcher(fresh_dispatcher, fa, _stand_in())
    case = _small()
    got, want = _run(fa.frame_attention, case), _run(frame_attention_reference, case)
    assert torch.equal(got[0], want[0] + 1.0) and launcher.num_calls == 1
    half_d = torch.zeros((*case["k"].shape[:-1], 2 * case["k"].shape[-1]))[..., ::2]  # head_dim stride 2
    unsupported = {
        "fp64": dict(case, args=tuple(t.double() for t in case["args"]), k=case["k"].double(), v=case["v"].double()),
        "head_dim 24": _case(torch.float32, 2, (4, 2, 24), 5, seed=9),
        "P 64 > one tile": _case(torch.float32, 2, (4, 2, 32), 5, seed=8, num_positions=64),
        "cache head_dim not contiguous": dict(case, k=half_d, v=half_d.clone()),
    }
    for what, ucase in unsupported.items():
        _assert_same_run(_run(fa.frame_attention, ucase), _run(frame_attention_reference, ucase), what)
    empty = dict(case, args=tuple(t[:0] if t.dim() > 1 else t for t in case["args"]), position=case["position"][:0])
    assert _run(fa.frame_attention, empty)[0].shape == (0, 4, 32)
    assert launcher.num_calls == 1, "unsupported inputs must not reach the launcher"
    assert fa.triton_failure() is None


def test_grad_path_uses_reference_and_backprops(fresh_dispatcher):
    launcher = use_launcher(fresh_dispatcher, fa, _stand_in())
    case = _small(seed=13)
    q, k, v, qw, kw, cos, sin = case["args"]
    qw = qw.clone().requires_grad_(True)
    out, _, _ = _run(fa.frame_attention, dict(case, args=(q, k, v, qw, kw, cos, sin)))
    assert launcher.num_calls == 0 and out.requires_grad
    out.sum().backward()
    assert qw.grad is not None and torch.isfinite(qw.grad).all()
    with torch.no_grad():
        _run(fa.frame_attention, dict(case, args=(q, k, v, qw, kw, cos, sin)))
    assert launcher.num_calls == 1, "without grad mode the kernel must be used"


def test_failure_is_logged_once_and_remembered(fresh_dispatcher, caplog):
    case = _small(torch.bfloat16, seed=14)
    want = _run(frame_attention_reference, case)
    check_failure_logged_once_and_remembered(fresh_dispatcher, caplog, fa, lambda: _run(fa.frame_attention, case),
                                             lambda got: _assert_same_run(got, want, "fallback"))


def test_import_failure_is_recorded(fresh_dispatcher, caplog):
    case = _small(seed=15)
    want = _run(frame_attention_reference, case)
    check_import_failure_is_recorded(fresh_dispatcher, caplog, fa, lambda: _run(fa.frame_attention, case),
                                     lambda got: _assert_same_run(got, want, "fallback"))


def test_real_launch_failure_falls_back(fresh_dispatcher):
    from kernels import frame_attention_triton

    case = _small(torch.bfloat16, seed=16)
    want = _run(frame_attention_reference, case)
    check_real_launch_failure_falls_back(fresh_dispatcher, fa, frame_attention_triton,
                                         lambda: _run(fa.frame_attention, case),
                                         lambda got: _assert_same_run(got, want, "fallback"))


def _changed(case, **changes):
    """The case with some inputs replaced: fn(old) for each name given (an activation, the k_cache
    or v_cache stack, or position)."""
    names = ("q", "k", "v", "q_weight", "k_weight", "cos", "sin")
    args = dict(zip(names, case["args"]))
    others = {"k_cache": "k", "v_cache": "v", "position": "position"}
    case = dict(case)
    for name, fn in changes.items():
        if name in args:
            args[name] = fn(args[name])
        else:
            case[others[name]] = fn(case[others[name]])
    return dict(case, args=tuple(args[n] for n in names))


@pytest.mark.parametrize("change, match", [
    (dict(q=lambda t: t.expand(2, 2, 4, 32)), r"q \[B, 1, H, D\]"),
    (dict(q=lambda t: t[:, :, :3]), r"multiple of KV"),
    (dict(k=lambda t: t[..., :16]), r"k \(2, 1, 2, 16\) and v \(2, 1, 2, 32\) must be \[2, 1, KV, 32\]"),
    (dict(v=lambda t: t[:, :, :1]), r"k \(2, 1, 2, 32\) and v \(2, 1, 1, 32\)"),
    (dict(cos=lambda t: t[..., :16]), r"cos must have shape \[2, 1, 32\]"),
    (dict(k_weight=lambda t: t[:16]), r"k_weight must have shape \[32\]"),
    (dict(k_cache=lambda t: t[:, :1], v_cache=lambda t: t[:, :1]), r"caches \[S >= 2, 2, P, 32\]"),
    (dict(v_cache=lambda t: t[..., :8]), r"caches \[S >= 2, 2, P, 32\] of one shape"),
    (dict(position=lambda t: t[:1]), r"position must be int64/int32 \[2\]"),
    (dict(position=lambda t: t.float()), r"position must be int64/int32 \[2\]"),
    (dict(cos=lambda t: t.double()), r"cos is torch.float64"),
    (dict(k_cache=lambda t: t.bfloat16()), r"k_cache is torch.bfloat16"),
    (dict(position=lambda t: t.to("meta")), r"position is on meta"),
], ids=["L2", "H%KV", "k shape", "v shape", "cos shape", "weight shape", "cache rows", "cache shapes",
        "position shape", "position dtype", "cos dtype", "cache dtype", "position device"])
def test_bad_arguments_raise_value_error(fresh_dispatcher, change, match):
    with pytest.raises(ValueError, match=match):
        _run(fa.frame_attention, _changed(_small(), **change))
    assert fa.triton_failure() is None, "bad input must not disable the kernel"


def test_is_one_op_under_dispatch_mode(fresh_dispatcher):
    case = _small(torch.bfloat16, seed=17)
    k_stack, v_stack = case["k"].clone(), case["v"].clone()
    k_cache, v_cache = k_stack[TARGET], v_stack[TARGET]
    with torch.no_grad(), OpCounter() as counter:
        out = fa.frame_attention(*case["args"], EPS, k_cache, v_cache, case["position"], case["scale"])
    assert counter.ops == [f"{OP_NAME}.default"]
    _assert_same_run((out, k_stack, v_stack), _run(frame_attention_reference, case), "op")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_fake_matches_real(dtype):
    """The schema declares both caches mutated; the fake's output matches the real one."""
    case = _small(dtype, seed=18)
    q, k, v, qw, kw, cos, sin = case["args"]
    torch.library.opcheck(fa.frame_attention_op,
                          (q, k, v, qw, kw, cos, sin, EPS, case["k"][TARGET].clone(), case["v"][TARGET].clone(),
                           case["position"], case["scale"]),
                          test_utils=("test_schema", "test_faketensor"))


# ---------------------------------------------------------------------------------------------
# Ahead-of-time compile for Hopper (no GPU needed)


def _fma_lines(ptx: str) -> set:
    """Lines of frame_attention_triton.py (PTX file 1) that fma.rn.f32 instructions come from: the
    last `.loc 1 LINE`, or `inlined_at 1 LINE` for code inlined from other files, before each."""
    assert re.search(r'\.file\s+1\s+"[^"]*frame_attention_triton\.py"', ptx)
    lines, line = set(), None
    for text in ptx.splitlines():
        loc = re.match(r"\s*\.loc\s+(\d+)\s+(\d+)", text)
        if loc:
            inlined = re.search(r"inlined_at\s+1\s+(\d+)", text)
            line = int(inlined.group(1)) if inlined else int(loc.group(2)) if loc.group(1) == "1" else line
        elif re.search(r"\bfma\.rn\.f32", text):
            lines.add(line)
    return lines


@pytest.mark.parametrize("dtype, group, batch", [("bf16", 2, 1), ("bf16", 2, 256), ("bf16", 1, 3), ("fp32", 2, 3),
                                                 ("fp16", 16, 3)])
def test_kernel_compiles_for_hopper_without_fma_in_norm_rope(dtype, group, batch):
    """The GPU variant for the predictor's shape (D = 128, a 16-position cache) compiles to an sm_90
    cubin, and no FMA contraction touches q or K (their rounding must stay eager's). A group of 16
    makes the score and P.V tiles big enough for Triton to turn the multiply-reduce into an FMA dot:
    fma there is fine (the attention is held to a tolerance), so only the lines before the
    attention are checked."""
    from kernels import frame_attention_triton as fat
    import inspect

    skip_if_interpreting(fat)
    names = list(inspect.signature(fat._frame_attention_kernel.fn).parameters)
    block_h, block_n = fat.block_sizes(group * 8, 8, FRAME_POSITIONS)
    constexprs = {"GROUP": group, "BLOCK_H": block_h, "BLOCK_N": block_n, "HALF": 64,
                  "ROUND": {"fp32": 0, "bf16": 1, "fp16": 2}[dtype], "WRITE_Q": False}
    signature = {n: "constexpr" if n in constexprs else "*i64" if n == "pos_ptr" else f"*{dtype}"
                 if n.endswith("_ptr") else "fp32" if n in ("eps", "qk_scale") else "i32" for n in names}
    # the position's pointer and stride (0 when expanded) are not 16-divisible
    divisible = [i for i, n in enumerate(names) if (n.endswith("_ptr") or "stride" in n) and not n.startswith("pos")]
    kernel = compile_for_hopper(fat._frame_attention_kernel, signature, constexprs, divisible,
                                num_warps=fat.choose_num_warps(batch, 8), **fat.LAUNCH_OPTIONS)
    ptx = kernel.asm["ptx"]
    assert "rsqrt.approx" in ptx and "ex2.approx" in ptx
    source, first_line = inspect.getsourcelines(fat._frame_attention_kernel.fn)
    attention_line = first_line + next(i for i, text in enumerate(source) if "# 3. attention" in text)
    early = sorted(line for line in _fma_lines(ptx) if line is None or line < attention_line)
    assert not early, f"FMA contraction in the q/K arithmetic (lines {early}) changes the eager rounding"
    if group <= 2:  # the predictor's groups: no dot rewrite, no fma at all
        assert not re.search(r"\bfma\.rn\.f32", ptx)


# ---------------------------------------------------------------------------------------------
# Child process body


def _run_child(work_dir: Path) -> None:
    from kernels.frame_attention_triton import frame_attention_triton, is_interpreting
    from kernels.qk_norm_rope_triton import qk_norm_rope_write_kv_triton

    outputs = {}
    for name, case in _cases().items():
        q = case["args"][0]
        q_out = torch.empty((q.shape[0], q.shape[2], q.shape[3]), dtype=q.dtype)
        outputs[f"kernel/{name}"] = (*_run(frame_attention_triton, case, q_out=q_out), q_out)
        if name in GARBAGE_CASES:
            outputs[f"garbage/{name}"] = _run(frame_attention_triton, case, garbage=GARBAGE)
        if name in DISPATCH_CASES:
            outputs[f"dispatch/{name}"] = _run(fa.frame_attention, case)
        if name in RANDN:
            outputs[f"write_kv/{name}"] = _run_write_kv(qk_norm_rope_write_kv_triton, case)
    outputs["out_of_range"] = _run(frame_attention_triton, _out_of_range_case())
    case = _cases()["fp32-b1-h4kv1d64-p0"]
    k_cache, v_cache = case["k"][TARGET].clone(), case["v"][TARGET].clone()
    with torch.no_grad(), OpCounter() as counter:
        fa.frame_attention(*case["args"], EPS, k_cache, v_cache, case["position"], case["scale"])
    save_child_results(work_dir, outputs, fa, is_interpreting(), counter)


if __name__ == "__main__":
    child_main(_run_child)
