"""add_rms_norm: Triton kernel (CPU interpreter) vs the eager reference, the qwen3tts::add_rms_norm op,
routing.

triton.jit picks the interpreter when the kernel module is imported, so every real kernel launch
happens in one child process started with TRITON_INTERPRET=1 and QWEN3_TTS_ADDNORM_CPU_TRITON=1
(`python tests/test_add_rmsnorm.py --child DIR`): the parent writes the inputs, the child only runs
the kernel and the dispatcher, and every comparison happens here in the parent. The dispatcher's
fallbacks and the op registration are tested in-process with stand-in launchers.
"""
from __future__ import annotations

import operator
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
from kernels import add_rmsnorm
from kernels.add_rmsnorm_reference import add_rms_norm_reference
from kernels.rmsnorm_reference import rms_norm_reference

EPS = 1e-6
OP_NAME = "qwen3tts.add_rms_norm"
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
# Talker (2048) / code predictor (1024) hidden sizes at decode batch x length, batch 64, a
# non-power-of-two row (masked tail), the largest supported row and short rows packed per program.
SHAPES = [(1, 2048), (3, 2, 1024), (64, 2048), (4, 1000), (2, 8192), (3, 5, 128)]
# (shape, (BLOCK_M, BLOCK_N, num_warps)) forced through the launcher: several rows per program with
# a partial last tile, BLOCK_N much wider than the row.
FORCED_BLOCKS = [
    ((3, 2, 1024), (4, 1024, 4)),
    ((4, 1000), (1, 2048, 8)),
    ((3, 5, 128), (4, 128, 1)),
]
INT_VIEW = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32}


def _name(dname, shape):
    return f"{dname}-{'x'.join(map(str, shape))}"


def _make(shape, dtype, seed, r_dtype=None, w_dtype=None):
    """x (an attention/MLP output), residual (the larger residual stream), weight."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=gen).to(dtype)
    residual = (torch.randn(shape, generator=gen) * 4.0 + 0.5).to(r_dtype or dtype)
    w = (1.0 + 0.3 * torch.randn(shape[-1], generator=gen)).to(w_dtype or dtype)
    return x, residual, w


def _all_cases():
    cases = {}
    for shape in SHAPES:
        for dname, dtype in DTYPES.items():
            if dname == "fp16" and shape != (3, 2, 1024):
                continue
            cases[_name(dname, shape)] = _make(shape, dtype, seed=len(cases))
    # mixed dtypes: sum in torch.result_type(x, residual), output in result_type(weight, sum)
    cases["bf16x-fp32r-3x2x1024"] = _make((3, 2, 1024), torch.bfloat16, seed=50, r_dtype=torch.float32)
    cases["bf16-fp32w-3x2x1024"] = _make((3, 2, 1024), torch.bfloat16, seed=51, w_dtype=torch.float32)
    cases["bf16-tiny-row-2x1"] = _make((2, 1), torch.bfloat16, seed=52)
    # subnormal and huge values: the sum rounds to bf16 subnormals / overflows to inf
    x, r, w = _make((2, 1024), torch.bfloat16, seed=53)
    x[0, :512] = torch.arange(1, 513).to(torch.int16).view(torch.bfloat16)  # bf16 subnormals
    r[0, :512] = -x[0, :512] * 0.5
    x[1, :4], r[1, :4] = 3e38, 3e38
    cases["bf16-subnormal-inf-2x1024"] = (x, r, w)
    return cases


def _strided_inputs():
    """name -> (x, residual, weight) where x and/or residual is not a plain contiguous tensor."""
    fused = torch.randn(4, 2, 2048).to(torch.bfloat16)  # e.g. two outputs of one fused projection
    big = (torch.randn(4, 6, 2100) * 4).to(torch.bfloat16)
    _, _, w = _make((1024,), torch.bfloat16, seed=61)
    return {
        "chunk": (fused.chunk(2, dim=-1)[1], big[:, :2, 16:1040], w),  # views: row strides 2048 / 2100
        "every_other": (fused[:, :1, :1024].expand(4, 2, 1024), big[:, ::3, 16:1040], w),  # copied
        "col_step": (fused[..., ::2], big[:, :2, :2048:2], w),  # column stride 2: copied
        "fp32_chunk": (fused.float().chunk(2, dim=-1)[0], big[:, :2, 16:1040].float(), w.float()),
    }


def _bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same bits (so -0.0 != +0.0), except that any NaN equals any NaN."""
    nan = torch.isnan(a)
    iv = INT_VIEW[a.dtype]
    return torch.equal(nan, torch.isnan(b)) and torch.equal(a[~nan].view(iv), b[~nan].view(iv))


def _ulp_distance(a: torch.Tensor, b: torch.Tensor) -> int:
    """Largest distance in representable values over the finite elements (same signs assumed, as here)."""
    finite = torch.isfinite(a) & torch.isfinite(b)
    iv = INT_VIEW[a.dtype]
    return int((a[finite].view(iv).long() - b[finite].view(iv).long()).abs().max())


def _rstd_neighbours(rstd: torch.Tensor, steps: int):
    """rstd and the fp32 values up to `steps` ulps above and below it."""
    out, up, down = [rstd], rstd, rstd
    for _ in range(steps):
        up, down = torch.nextafter(up, torch.tensor(float("inf"))), torch.nextafter(down, torch.tensor(0.0))
        out += [up, down]
    return out


def _assert_matches_reference(out, x, residual, w, rstd_ulps=2):
    """summed: bit-identical. normed: bit-identical, except in rows where the kernel's rstd is a few
    fp32 ulps from torch's because it sums the squares in another order (a tree; torch's CPU sum is
    a vectorized cascade, CUDA's yet another order). Rounding s * rstd to bf16/fp16 turns that into a
    1-ulp step of the normalized value when it sits at a rounding tie (and up to 2 output ulps after
    the weight multiply). So each differing row must equal the reference formula evaluated with an
    rstd within `rstd_ulps` fp32 ulps of torch's: anything else is a kernel bug."""
    normed, summed = out
    ref_normed, ref_summed = add_rms_norm_reference(x, residual, w, EPS)
    for got, ref in ((normed, ref_normed), (summed, ref_summed)):
        assert got.shape == ref.shape and got.dtype == ref.dtype and got.is_contiguous()
    # the sum is one rounded add in every dtype: bit-identical (incl. infs, subnormals, -0.0)
    assert _bits_equal(summed, ref_summed)
    num_cols = x.shape[-1]
    got_rows, ref_rows = normed.reshape(-1, num_cols), ref_normed.reshape(-1, num_cols)
    s32 = ref_summed.reshape(-1, num_cols).float()
    rstd = torch.rsqrt(s32.pow(2).mean(-1, keepdim=True) + EPS)
    for i in range(got_rows.shape[0]):
        if _bits_equal(got_rows[i], ref_rows[i]):
            continue
        candidates = [w * (s32[i] * c).to(ref_summed.dtype) for c in _rstd_neighbours(rstd[i], rstd_ulps)]
        assert any(_bits_equal(got_rows[i], c) for c in candidates), (
            f"row {i}: {int((got_rows[i] != ref_rows[i]).sum())} elements differ (max "
            f"{_ulp_distance(got_rows[i], ref_rows[i])} ulp), not explained by a {rstd_ulps}-ulp rstd change")
        if got_rows.dtype != torch.float32:
            assert _ulp_distance(got_rows[i], ref_rows[i]) <= 2


def test_rstd_explanation_is_strict():
    """The tolerance above is not a loophole: a one-ulp error in the sum or the output is caught."""
    x, r, w = _make((3, 1024), torch.bfloat16, seed=70)
    normed, summed = add_rms_norm_reference(x, r, w, EPS)
    _assert_matches_reference((normed, summed), x, r, w)
    bad_normed, bad_summed = normed.clone(), summed.clone()
    bad_normed.view(torch.int16)[1, 5] += 1
    bad_summed.view(torch.int16)[1, 5] += 1
    for bad in ((bad_normed, summed), (normed, bad_summed)):
        with pytest.raises(AssertionError):
            _assert_matches_reference(bad, x, r, w)


# ---------------------------------------------------------------------------------------------
# Reference == the eager code it replaces


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_reference_is_the_decoder_layer_pattern(dtype):
    """`h = h + out; normed = norm(h)` with the model's RMSNorm module, and the official Qwen3RMSNorm
    written out: same bits as add_rms_norm_reference, whichever operand is called x."""
    from talker_service.model.layers import RMSNorm

    h, out, w = _make((3, 2, 256), dtype, seed=1)
    norm = RMSNorm(256, EPS).to(dtype)
    with torch.no_grad():
        norm.weight.copy_(w)
        h_new = h + out
        expected = norm(h_new)
        var = h_new.to(torch.float32).pow(2).mean(-1, keepdim=True)
        official = w * (h_new.to(torch.float32) * torch.rsqrt(var + EPS)).to(dtype)
        for normed, summed in (add_rms_norm_reference(h, out, w, EPS), add_rms_norm_reference(out, h, w, EPS),
                               add_rmsnorm.add_rms_norm(h, out, w, EPS)):  # the CPU op: reference inside
            assert torch.equal(summed, h_new)
            assert torch.equal(normed, expected) and torch.equal(normed, official)
            assert torch.equal(normed, rms_norm_reference(summed, w, EPS))


# ---------------------------------------------------------------------------------------------
# Kernel under the Triton interpreter (child process)


@pytest.fixture(scope="module")
def interpreted(tmp_path_factory):
    work_dir = tmp_path_factory.mktemp("add_rmsnorm_interp")
    torch.save(_all_cases(), work_dir / "cases.pt")
    torch.save(_strided_inputs(), work_dir / "strided.pt")
    info = run_interpreter_child(__file__, work_dir, add_rmsnorm.CPU_TRITON_ENV, timeout=120)
    return (torch.load(work_dir / "cases.pt"), torch.load(work_dir / "strided.pt"),
            torch.load(work_dir / "outputs.pt"), info)


@pytest.mark.parametrize("name", list(_all_cases()))
def test_kernel_matches_reference(interpreted, name):
    cases, _, outputs, info = interpreted
    assert info["is_interpreting"], "the child must run the Triton interpreter, not a GPU kernel"
    _assert_matches_reference(outputs[f"kernel/{name}"], *cases[name])


@pytest.mark.parametrize("name", list(_all_cases()))
def test_dispatcher_uses_triton_when_forced(interpreted, name):
    _, _, outputs, info = interpreted
    assert_dispatcher_took_triton(info)
    for got, kernel in zip(outputs[f"dispatch/{name}"], outputs[f"kernel/{name}"]):
        assert torch.equal(got.view(INT_VIEW[got.dtype]), kernel.view(INT_VIEW[kernel.dtype]))


def _forced_key(name, block):
    return "forced/%s/m%dn%dw%d" % ((name,) + tuple(block))


@pytest.mark.parametrize("shape, block", FORCED_BLOCKS, ids=lambda v: "x".join(map(str, v)))
def test_every_block_shape_is_correct(interpreted, shape, block):
    cases, _, outputs, _ = interpreted
    for dname in ("fp32", "bf16"):
        name = _name(dname, shape)
        _assert_matches_reference(outputs[_forced_key(name, block)], *cases[name])


@pytest.mark.parametrize("name", list(_strided_inputs()))
def test_strided_inputs(interpreted, name):
    _, strided, outputs, _ = interpreted
    _assert_matches_reference(outputs[f"strided/{name}"], *strided[name])


def test_leading_dims_collapse(interpreted):
    _, _, outputs, _ = interpreted
    # [3, 2, 1024] is normalized as 6 independent rows: same bits as the [6, 1024] launch
    for got, flat in zip(outputs["kernel/bf16-3x2x1024"], outputs["collapsed/6x1024"]):
        assert torch.equal(got.view(6, 1024), flat)


def test_op_is_one_dispatch_on_triton_path(interpreted):
    _, _, _, info = interpreted
    assert info["triton_path_op_counts"] == {OP_NAME: 1}


# ---------------------------------------------------------------------------------------------
# Op registration, counting, tracing (in-process; CPU default path = reference inside the op)


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_op_counts_as_one_launch(device):
    x, r, w = (t.to(device) for t in _make((3, 2, 1024), torch.bfloat16, seed=7))
    with torch.no_grad(), OpCounter() as counter:
        normed, summed = add_rmsnorm.add_rms_norm(x, r, w, EPS)
    assert dict(counter.counts) == {OP_NAME: 1}
    for t in (normed, summed):
        assert t.shape == x.shape and t.dtype == torch.bfloat16 and t.device.type == device
    with torch.no_grad(), OpCounter() as eager:
        add_rms_norm_reference(x, r, w, EPS)
    assert sum(eager.counts.values()) >= 8, eager.counts  # what the op replaces


def test_make_fx_sees_one_node():
    from torch.fx.experimental.proxy_tensor import make_fx

    x, r, w = _make((2, 1024), torch.bfloat16, seed=8)
    gm = make_fx(lambda a, b, c: add_rmsnorm.add_rms_norm(a, b, c, EPS), tracing_mode="fake")(x, r, w)
    calls = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert calls.count(torch.ops.qwen3tts.add_rms_norm.default) == 1, calls
    assert set(calls) == {torch.ops.qwen3tts.add_rms_norm.default, operator.getitem}, calls


@pytest.mark.parametrize("dtypes", [(torch.float32,) * 3, (torch.bfloat16,) * 3,
                                    (torch.bfloat16, torch.float32, torch.bfloat16),
                                    (torch.bfloat16, torch.bfloat16, torch.float32)])
def test_opcheck(dtypes):
    x, r, w = _make((3, 4, 128), dtypes[0], seed=9, r_dtype=dtypes[1], w_dtype=dtypes[2])
    torch.library.opcheck(torch.ops.qwen3tts.add_rms_norm.default, (x, r, w, EPS))
    torch.library.opcheck(torch.ops.qwen3tts.add_rms_norm.default, (x[:, ::2, :64], r[:, 1::2, 64:], w[:64], EPS))


# ---------------------------------------------------------------------------------------------
# Dispatcher routing and fallbacks (in-process, stand-in launchers)


@pytest.fixture
def fresh_dispatcher(monkeypatch):
    return fresh_route(monkeypatch, add_rmsnorm)


def _stand_in():
    def result(x, residual, weight, eps):
        normed, summed = add_rms_norm_reference(x, residual, weight, eps)
        return normed + 1.0, summed + 1.0  # distinguishable from eager
    return CountingLauncher(result)


def _assert_same(got, want):
    assert len(got) == 2 and all(torch.equal(a, b) for a, b in zip(got, want))


def test_cpu_default_uses_reference_without_touching_triton(fresh_dispatcher):
    forbid_triton(fresh_dispatcher, add_rmsnorm)
    for dtype in (torch.float32, torch.bfloat16):
        x, r, w = _make((3, 5, 128), dtype, seed=1)
        _assert_same(add_rmsnorm.add_rms_norm(x, r, w, EPS), add_rms_norm_reference(x, r, w, EPS))


def test_forced_cpu_path_calls_launcher(fresh_dispatcher):
    launcher = use_launcher(fresh_dispatcher, add_rmsnorm, _stand_in())
    x, r, w = _make((7, 1024), torch.float32, seed=1)
    normed, summed = add_rms_norm_reference(x, r, w, EPS)
    _assert_same(add_rmsnorm.add_rms_norm(x, r, w, EPS), (normed + 1.0, summed + 1.0))
    # no kernel for fp64 (any operand), for rows past 8192 or for an empty input: eager, launcher untouched
    _assert_same(add_rmsnorm.add_rms_norm(x, r.double(), w, EPS), add_rms_norm_reference(x, r.double(), w, EPS))
    xl, rl, wl = _make((1, 8193), torch.float32, seed=2)
    _assert_same(add_rmsnorm.add_rms_norm(xl, rl, wl, EPS), add_rms_norm_reference(xl, rl, wl, EPS))
    assert add_rmsnorm.add_rms_norm(x[:0], r[:0], w, EPS)[0].shape == (0, 1024)
    assert launcher.num_calls == 1


def test_grad_path_uses_reference_and_backprops(fresh_dispatcher):
    launcher = use_launcher(fresh_dispatcher, add_rmsnorm, _stand_in())
    x, r, w = _make((4, 128), torch.float32, seed=2)
    w.requires_grad_(True)  # a module's Parameter
    normed, summed = add_rmsnorm.add_rms_norm(x, r, w, EPS)
    assert launcher.num_calls == 0 and normed.requires_grad
    normed.sum().backward()
    s = x + r
    torch.testing.assert_close(w.grad, (s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + EPS)).sum(0))
    with torch.no_grad():
        add_rmsnorm.add_rms_norm(x, r, w, EPS)
    with torch.inference_mode():
        add_rmsnorm.add_rms_norm(x, r, w, EPS)
    assert launcher.num_calls == 2, "without grad mode the kernel must be used"


def _check_is_reference(x, r, w):
    return lambda got: _assert_same(got, add_rms_norm_reference(x, r, w, EPS))


def test_failure_is_logged_once_and_remembered(fresh_dispatcher, caplog):
    x, r, w = _make((3, 5, 128), torch.bfloat16, seed=3)
    check_failure_logged_once_and_remembered(fresh_dispatcher, caplog, add_rmsnorm,
                                             lambda: add_rmsnorm.add_rms_norm(x, r, w, EPS), _check_is_reference(x, r, w))


def test_import_failure_is_recorded(fresh_dispatcher, caplog):
    x, r, w = _make((2, 128), torch.float32, seed=4)
    check_import_failure_is_recorded(fresh_dispatcher, caplog, add_rmsnorm,
                                     lambda: add_rmsnorm.add_rms_norm(x, r, w, EPS), _check_is_reference(x, r, w))


def test_real_launch_failure_falls_back(fresh_dispatcher):
    from kernels import add_rmsnorm_triton

    x, r, w = _make((2, 1024), torch.bfloat16, seed=5)
    check_real_launch_failure_falls_back(fresh_dispatcher, add_rmsnorm, add_rmsnorm_triton,
                                         lambda: add_rmsnorm.add_rms_norm(x, r, w, EPS), _check_is_reference(x, r, w))


@pytest.mark.parametrize("bad, match", [
    (lambda x, r, w: (x, r, w[:-1]), r"weight \[N\]"),
    (lambda x, r, w: (x, r, w.view(1, -1)), r"weight \[N\]"),
    (lambda x, r, w: (x, r[:1], w), r"of one shape"),
    (lambda x, r, w: (x, r.to("meta"), w), r"residual is on meta"),
    (lambda x, r, w: (x, r, w.to("meta")), r"weight is on meta"),
])
def test_bad_arguments_raise_value_error(fresh_dispatcher, bad, match):
    args = bad(*_make((2, 128), torch.float32, seed=6))
    with pytest.raises(ValueError, match=match):
        add_rmsnorm.add_rms_norm(*args, EPS)
    assert add_rmsnorm.triton_failure() is None, "bad input must not disable the kernel"


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_kernel_compiles_for_hopper(dtype):
    """Ahead-of-time compile to an sm_90 cubin (no GPU needed): the bit-level bf16 handling, the
    correctly rounded divide and 16-byte vector loads/stores when the row strides are multiples of 16."""
    from kernels import add_rmsnorm_triton

    skip_if_interpreting(add_rmsnorm_triton)
    signature = {"x_ptr": f"*{dtype}", "r_ptr": f"*{dtype}", "w_ptr": f"*{dtype}", "y_ptr": f"*{dtype}",
                 "s_ptr": f"*{dtype}", "num_rows": "i32", "num_cols": "i32", "num_cols_f": "fp32",
                 "x_row_stride": "i32", "r_row_stride": "i32", "out_row_stride": "i32", "eps": "fp32",
                 "BLOCK_M": "constexpr", "BLOCK_N": "constexpr"}
    kernel = compile_for_hopper(add_rmsnorm_triton._add_rms_norm_kernel, signature, {"BLOCK_M": 1, "BLOCK_N": 2048},
                                (0, 1, 2, 3, 4, 6, 8, 9, 10), num_warps=8, **add_rmsnorm_triton.LAUNCH_OPTIONS)
    ptx = kernel.asm["ptx"]
    assert "div.rn.f32" in ptx and "rsqrt.approx" in ptx
    assert len(re.findall(r"ld\.global[^\n]*\.v4", ptx)) >= 2, "x and residual: 16-byte loads"
    assert len(re.findall(r"st\.global[^\n]*\.v4", ptx)) >= 2, "summed and normed: 16-byte stores"


# ---------------------------------------------------------------------------------------------
# Child process body


def _run_child(work_dir: Path) -> None:
    from kernels.add_rmsnorm_triton import add_rms_norm_triton, is_interpreting

    cases = torch.load(work_dir / "cases.pt")
    outputs = {}
    for name, (x, r, w) in cases.items():
        outputs[f"kernel/{name}"] = add_rms_norm_triton(x, r, w, EPS)
        outputs[f"dispatch/{name}"] = add_rmsnorm.add_rms_norm(x, r, w, EPS)
    for shape, block in FORCED_BLOCKS:
        for dname in ("fp32", "bf16"):
            name = _name(dname, shape)
            outputs[_forced_key(name, block)] = add_rms_norm_triton(*cases[name], EPS, block=block)
    for name, (x, r, w) in torch.load(work_dir / "strided.pt").items():
        outputs[f"strided/{name}"] = add_rms_norm_triton(x, r, w, EPS)
    x, r, w = cases["bf16-3x2x1024"]
    outputs["collapsed/6x1024"] = add_rms_norm_triton(x.reshape(6, 1024), r.reshape(6, 1024), w, EPS)
    with torch.no_grad(), OpCounter() as counter:
        add_rmsnorm.add_rms_norm(x, r, w, EPS)
    save_child_results(work_dir, outputs, add_rmsnorm, is_interpreting(), counter)


if __name__ == "__main__":
    child_main(_run_child)
