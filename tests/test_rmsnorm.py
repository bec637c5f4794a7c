"""RMSNorm: Triton kernel (CPU interpreter) vs the eager reference, the qwen3tts::rms_norm op, routing.

triton.jit picks the interpreter when the kernel module is imported, so every real kernel launch
happens in one child process started with TRITON_INTERPRET=1 and QWEN3_TTS_RMSNORM_CPU_TRITON=1
(`python tests/test_rmsnorm.py --child DIR`): the parent writes the inputs, the child only runs the
kernel and the dispatcher, and every comparison happens here in the parent. The dispatcher's
fallbacks and the op registration are tested in-process with stand-in launchers.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

# triton_support first: it puts the repo root on sys.path for the kernels imports below
from triton_support import (CountingLauncher, OpCounter, assert_dispatch_equals_kernel,
                            check_failure_logged_once_and_remembered, check_import_failure_is_recorded,
                            check_real_launch_failure_falls_back, child_main, compile_for_hopper, equal_to,
                            forbid_triton, fresh_route, run_interpreter_child, save_child_results,
                            skip_if_interpreting, use_launcher)
from kernels import rmsnorm
from kernels.rmsnorm_reference import rms_norm_reference

EPS = 1e-6
OP_NAME = "qwen3tts.rms_norm"
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
# Hidden sizes 1024/2048, per-head q/k norm over head_dim 128 with two leading dims, a
# non-power-of-two row (masked tail) and the largest supported row.
SHAPES = [(1, 2048), (3, 5, 128), (7, 1024), (4, 1000), (2, 8192)]
# (shape, (BLOCK_M, BLOCK_N, num_warps)) forced through the launcher: several rows per program with
# a partial last tile, BLOCK_N much wider than the row, one row per program for short rows.
FORCED_BLOCKS = [
    ((3, 5, 128), (4, 128, 1)),
    ((7, 1024), (4, 1024, 4)),
    ((4, 1000), (1, 2048, 8)),
    ((3, 5, 128), (1, 128, 1)),
]
INT_VIEW = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32}


def _make(shape, dtype, seed, w_dtype=None):
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(shape, generator=gen) * 3.0 + 0.5).to(dtype)
    w = (1.0 + 0.3 * torch.randn(shape[-1], generator=gen)).to(w_dtype or dtype)
    return x, w


def _all_cases():
    cases = {}
    for shape in SHAPES:
        for dname, dtype in DTYPES.items():
            if dname == "fp16" and shape != (7, 1024):
                continue
            cases[f"{dname}-{'x'.join(map(str, shape))}"] = _make(shape, dtype, seed=len(cases))
    # weight in another dtype than x: output in torch.result_type(weight, x) = fp32
    cases["bf16x-fp32w-7x1024"] = _make((7, 1024), torch.bfloat16, seed=50, w_dtype=torch.float32)
    cases["fp32x-bf16w-3x5x128"] = _make((3, 5, 128), torch.float32, seed=51, w_dtype=torch.bfloat16)
    cases["bf16-tiny-row-2x1"] = _make((2, 1), torch.bfloat16, seed=52)
    return cases


def _ulp_distance(a: torch.Tensor, b: torch.Tensor) -> int:
    """Largest distance in representable values (same sign assumed, as here)."""
    assert a.dtype == b.dtype
    iv = INT_VIEW[a.dtype]
    return int((a.view(iv).long() - b.view(iv).long()).abs().max())


def _assert_matches_reference(y, x, w):
    ref = rms_norm_reference(x, w, EPS)
    assert y.shape == ref.shape and y.dtype == ref.dtype and y.is_contiguous()
    if ref.dtype == torch.float32:
        # Sum order differs (tree vs torch's vectorized sum): a few fp32 ulps on the largest values.
        torch.testing.assert_close(y, ref, atol=1e-6, rtol=2e-6)
    else:
        # Both roundings are reproduced, so a miss can only come from the fp32 x * rstd (rstd from a
        # differently ordered sum) sitting within an fp32 ulp of a rounding tie: measured on 2M random
        # elements per size, bf16 missed 3 elements by 1 ulp (head_dim 128, none at 1000-8192) and
        # fp16 ~3e-5 of them by <= 2 ulp. These seeded cases are bit-identical.
        ulps = _ulp_distance(y, ref)
        assert ulps <= (1 if ref.dtype == torch.bfloat16 else 2), f"{ulps} ulp off the reference"
        assert torch.equal(y, ref), f"{int((y != ref).sum())} of {y.numel()} elements off by <= {ulps} ulp"


# ---------------------------------------------------------------------------------------------
# Kernel under the Triton interpreter (child process)


@pytest.fixture(scope="module")
def interpreted(tmp_path_factory):
    work_dir = tmp_path_factory.mktemp("rmsnorm_interp")
    torch.save(_all_cases(), work_dir / "cases.pt")
    info = run_interpreter_child(__file__, work_dir, rmsnorm.CPU_TRITON_ENV, timeout=120)
    return torch.load(work_dir / "cases.pt"), torch.load(work_dir / "outputs.pt"), info


@pytest.mark.parametrize("name", list(_all_cases()))
def test_kernel_matches_reference(interpreted, name):
    cases, outputs, info = interpreted
    assert info["is_interpreting"], "the child must run the Triton interpreter, not a GPU kernel"
    x, w = cases[name]
    _assert_matches_reference(outputs[f"kernel/{name}"], x, w)


@pytest.mark.parametrize("name", list(_all_cases()))
def test_dispatcher_uses_triton_when_forced(interpreted, name):
    cases, outputs, info = interpreted
    assert_dispatch_equals_kernel(info, outputs, name)


def _forced_key(name, block):
    return "forced/%s/m%dn%dw%d" % ((name,) + tuple(block))


@pytest.mark.parametrize("shape, block", FORCED_BLOCKS, ids=lambda v: "x".join(map(str, v)))
def test_every_block_shape_is_correct(interpreted, shape, block):
    cases, outputs, _ = interpreted
    for dname in ("fp32", "bf16"):
        name = f"{dname}-{'x'.join(map(str, shape))}"
        x, w = cases[name]
        _assert_matches_reference(outputs[_forced_key(name, block)], x, w)


def test_leading_dims_collapse_and_strided_rows(interpreted):
    cases, outputs, _ = interpreted
    x, w = cases["bf16-3x5x128"]
    # [3, 5, 128] is normalized as 15 independent rows: same bits as the [15, 128] launch
    assert torch.equal(outputs["kernel/bf16-3x5x128"].view(15, 128), outputs["collapsed/15x128"])
    big, _ = _make((4, 6, 160), torch.bfloat16, seed=60)
    _assert_matches_reference(outputs["strided/row_slice"], big[..., 16:144], w)  # row stride 160, a view
    _assert_matches_reference(outputs["strided/every_other"], big[:, ::2, 16:144], w)  # not collapsible
    _assert_matches_reference(outputs["strided/col_step"], big[..., ::2][..., :80], w[:80])  # copied first


def test_op_is_one_dispatch_on_triton_path(interpreted):
    _, _, info = interpreted
    assert info["triton_path_op_counts"] == {OP_NAME: 1}


# ---------------------------------------------------------------------------------------------
# Op registration, counting, tracing (in-process; CPU default path = reference inside the op)


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_op_counts_as_one_launch(device):
    x, w = (t.to(device) for t in _make((3, 5, 128), torch.bfloat16, seed=7))
    with torch.no_grad(), OpCounter() as counter:
        y = rmsnorm.rms_norm(x, w, EPS)
    assert dict(counter.counts) == {OP_NAME: 1}
    assert y.shape == x.shape and y.dtype == torch.bfloat16 and y.device.type == device
    with torch.no_grad(), OpCounter() as eager:
        rms_norm_reference(x, w, EPS)
    assert sum(eager.counts.values()) >= 7, eager.counts  # what the op replaces


def test_make_fx_sees_one_node():
    from torch.fx.experimental.proxy_tensor import make_fx

    x, w = _make((2, 1024), torch.bfloat16, seed=8)
    gm = make_fx(lambda a, b: rmsnorm.rms_norm(a, b, EPS), tracing_mode="fake")(x, w)
    calls = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert calls == [torch.ops.qwen3tts.rms_norm.default], calls


@pytest.mark.parametrize("dtypes", [(torch.float32, torch.float32), (torch.bfloat16, torch.bfloat16),
                                    (torch.bfloat16, torch.float32)])
def test_opcheck(dtypes):
    x, w = _make((3, 4, 128), dtypes[0], seed=9, w_dtype=dtypes[1])
    torch.library.opcheck(torch.ops.qwen3tts.rms_norm.default, (x, w, EPS))


# ---------------------------------------------------------------------------------------------
# Dispatcher routing and fallbacks (in-process, stand-in launchers)


@pytest.fixture
def fresh_dispatcher(monkeypatch):
    return fresh_route(monkeypatch, rmsnorm)


def _stand_in():
    return CountingLauncher(lambda x, w, eps: rms_norm_reference(x, w, eps) + 1.0)  # distinguishable from eager


def test_cpu_default_uses_reference_without_touching_triton(fresh_dispatcher):
    forbid_triton(fresh_dispatcher, rmsnorm)
    for dtype in (torch.float32, torch.bfloat16):
        x, w = _make((3, 5, 128), dtype, seed=1)
        assert torch.equal(rmsnorm.rms_norm(x, w, EPS), rms_norm_reference(x, w, EPS))


def test_forced_cpu_path_calls_launcher(fresh_dispatcher):
    launcher = use_launcher(fresh_dispatcher, rmsnorm, _stand_in())
    x, w = _make((7, 1024), torch.float32, seed=1)
    assert torch.equal(rmsnorm.rms_norm(x, w, EPS), rms_norm_reference(x, w, EPS) + 1.0)
    # no kernel for fp64 or for rows past 8192: eager, launcher untouched
    x64, w64 = x.double(), w.double()
    assert torch.equal(rmsnorm.rms_norm(x64, w64, EPS), rms_norm_reference(x64, w64, EPS))
    xl, wl = _make((1, 8193), torch.float32, seed=2)
    assert torch.equal(rmsnorm.rms_norm(xl, wl, EPS), rms_norm_reference(xl, wl, EPS))
    assert launcher.num_calls == 1


def test_grad_path_uses_reference_and_backprops(fresh_dispatcher):
    launcher = use_launcher(fresh_dispatcher, rmsnorm, _stand_in())
    x, w = _make((4, 128), torch.float32, seed=2)
    w.requires_grad_(True)  # a module's Parameter
    y = rmsnorm.rms_norm(x, w, EPS)
    assert launcher.num_calls == 0 and y.requires_grad
    y.sum().backward()
    torch.testing.assert_close(w.grad, (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS)).sum(0))
    with torch.no_grad():
        rmsnorm.rms_norm(x, w, EPS)
    with torch.inference_mode():
        rmsnorm.rms_norm(x, w, EPS)
    assert launcher.num_calls == 2, "without grad mode the kernel must be used"


def test_failure_is_logged_once_and_remembered(fresh_dispatcher, caplog):
    x, w = _make((3, 5, 128), torch.bfloat16, seed=3)
    check_failure_logged_once_and_remembered(fresh_dispatcher, caplog, rmsnorm, lambda: rmsnorm.rms_norm(x, w, EPS),
                                             equal_to(rms_norm_reference(x, w, EPS)))


def test_import_failure_is_recorded(fresh_dispatcher, caplog):
    x, w = _make((2, 128), torch.float32, seed=4)
    check_import_failure_is_recorded(fresh_dispatcher, caplog, rmsnorm, lambda: rmsnorm.rms_norm(x, w, EPS),
                                     equal_to(rms_norm_reference(x, w, EPS)))


def test_real_launch_failure_falls_back(fresh_dispatcher):
    from kernels import rmsnorm_triton

    x, w = _make((2, 1024), torch.bfloat16, seed=5)
    check_real_launch_failure_falls_back(fresh_dispatcher, rmsnorm, rmsnorm_triton, lambda: rmsnorm.rms_norm(x, w, EPS),
                                         equal_to(rms_norm_reference(x, w, EPS)))


@pytest.mark.parametrize("bad_w, match", [
    (lambda w: w[:-1], r"weight \[N\]"),
    (lambda w: w.view(1, -1), r"weight \[N\]"),
    (lambda w: w.to("meta"), r"weight is on meta"),
])
def test_bad_arguments_raise_value_error(fresh_dispatcher, bad_w, match):
    x, w = _make((2, 128), torch.float32, seed=6)
    with pytest.raises(ValueError, match=match):
        rmsnorm.rms_norm(x, bad_w(w), EPS)
    assert rmsnorm.triton_failure() is None, "bad input must not disable the kernel"


def test_choose_block():
    from kernels.rmsnorm_triton import choose_block

    assert choose_block(16, 128) == (1, 128, 1)  # decode q/k norm: rows spread over SMs
    assert choose_block(16 * 4096, 128) == (8, 128, 4)  # prefill q/k norm: rows packed per program
    assert choose_block(1, 2048) == (1, 2048, 8)
    assert choose_block(64, 1024) == (1, 1024, 4)
    assert choose_block(3, 1000) == (1, 1024, 4)
    assert choose_block(2, 8192) == (1, 8192, 8)


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_kernel_compiles_for_hopper(dtype):
    """Ahead-of-time compile to an sm_90 cubin (no GPU needed): the bit-level bf16 rounding, the
    correctly rounded divide and 16-byte vector loads when the row stride is a multiple of 16."""
    from kernels import rmsnorm_triton

    skip_if_interpreting(rmsnorm_triton)
    signature = {"x_ptr": f"*{dtype}", "w_ptr": f"*{dtype}", "y_ptr": f"*{dtype}", "num_rows": "i32",
                 "num_cols": "i32", "num_cols_f": "fp32", "x_row_stride": "i32", "y_row_stride": "i32",
                 "eps": "fp32", "BLOCK_M": "constexpr", "BLOCK_N": "constexpr"}
    kernel = compile_for_hopper(rmsnorm_triton._rms_norm_kernel, signature, {"BLOCK_M": 1, "BLOCK_N": 2048},
                                (0, 1, 2, 4, 6, 7), num_warps=8)
    ptx = kernel.asm["ptx"]
    assert "div.rn.f32" in ptx and "rsqrt.approx" in ptx
    assert re.search(r"ld\.global[^\n]*\.v4", ptx) and re.search(r"st\.global[^\n]*\.v4", ptx)


# ---------------------------------------------------------------------------------------------
# Child process body


def _run_child(work_dir: Path) -> None:
    from kernels.rmsnorm_triton import is_interpreting, rms_norm_triton

    cases = torch.load(work_dir / "cases.pt")
    outputs = {}
    for name, (x, w) in cases.items():
        outputs[f"kernel/{name}"] = rms_norm_triton(x, w, EPS)
        outputs[f"dispatch/{name}"] = rmsnorm.rms_norm(x, w, EPS)
    for shape, block in FORCED_BLOCKS:
        for dname in ("fp32", "bf16"):
            name = f"{dname}-{'x'.join(map(str, shape))}"
            x, w = cases[name]
            outputs[_forced_key(name, block)] = rms_norm_triton(x, w, EPS, block=block)
    x, w = cases["bf16-3x5x128"]
    outputs["collapsed/15x128"] = rms_norm_triton(x.reshape(15, 128), w, EPS)
    big, _ = _make((4, 6, 160), torch.bfloat16, seed=60)
    outputs["strided/row_slice"] = rms_norm_triton(big[..., 16:144], w, EPS)
    outputs["strided/every_other"] = rms_norm_triton(big[:, ::2, 16:144], w, EPS)
    outputs["strided/col_step"] = rms_norm_triton(big[..., ::2][..., :80], w[:80], EPS)
    with torch.no_grad(), OpCounter() as counter:
        rmsnorm.rms_norm(x, w, EPS)
    save_child_results(work_dir, outputs, rmsnorm, is_interpreting(), counter)


if __name__ == "__main__":
    child_main(_run_child)
