"""SnakeBeta: Triton kernel (CPU interpreter) vs the eager reference, launch heuristic, dispatcher fallbacks.

triton.jit picks the interpreter when the kernel module is imported, so the kernel runs in a child
process started with TRITON_INTERPRET=1 (`python tests/test_snakebeta.py --child DIR`): the parent
writes the inputs, the child only runs the kernel and the dispatcher, and every comparison happens
here in the parent.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

# triton_support first: it puts the repo root on sys.path for the kernels imports below
from triton_support import (ROOT, CountingLauncher, assert_dispatch_equals_kernel,
                            check_failure_logged_once_and_remembered, check_import_failure_is_recorded,
                            check_real_launch_failure_falls_back, child_main, compile_for_hopper, equal_to,
                            forbid_triton, fresh_route, run_interpreter_child, save_child_results,
                            skip_if_interpreting, use_launcher)
from kernels import snakebeta, snakebeta_config
from kernels.snakebeta_config import MIN_ELEMS_PER_PROGRAM, SnakeConfig, choose_config
from kernels.snakebeta_reference import (snake_beta_fused_reference, snake_beta_reference, snake_params_from_log,
                                         storage_ulp)

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
# Odd sizes: single element, rows shorter than any tile, B*C*T not a multiple of any block,
# T one past a power of two, and the decoder's first stage (T = 4 per frame, C = 1536).
SHAPES = [(1, 1, 1), (2, 3, 7), (3, 5, 1001), (1, 96, 4097), (2, 1536, 4), (4, 7, 33)]
# (shape, (block_c, block_t, num_warps)) forced through the launcher: 1x1 tiles, tiles wider than C
# or T, tiles shorter than the row (several time tiles per row), and a large 2-D tile. The interpreter
# costs ~5 ms per program, so the 1x1 tile gets a small tensor.
FORCED_CONFIGS = [
    ((2, 3, 7), (1, 1, 1)),
    ((3, 5, 1001), (8, 64, 1)),
    ((3, 5, 1001), (1, 2048, 4)),
    ((3, 5, 1001), (16, 64, 2)),
    ((3, 5, 1001), (4, 256, 4)),
    ((3, 5, 1001), (32, 128, 8)),
]
# The dispatcher's output is only compared with the kernel's, so the biggest cases are not run twice.
MAX_DISPATCH_NUMEL = 100_000


def _make_case(shape, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(shape, generator=gen) * 3.0).to(dtype)
    # Log-space parameters in [-1, 1]: a and b in [0.37, 2.7].
    alpha = torch.rand(shape[1], generator=gen) * 2 - 1
    beta = torch.rand(shape[1], generator=gen) * 2 - 1
    alpha_exp, inv_beta = snake_params_from_log(alpha, beta)
    return x, alpha_exp, inv_beta


def _all_cases():
    cases = {}
    for shape in SHAPES:
        for dname, dtype in DTYPES.items():
            cases[f"{dname}-{'x'.join(map(str, shape))}"] = _make_case(shape, dtype, seed=len(cases))
    # |x * a| up to ~1e5: exercises the pi range reduction far from zero.
    x, a, b = _make_case((2, 4, 300), torch.float32, seed=99)
    cases["fp32-large-arg"] = (x / 3.0, a * 1e4, b)
    return cases


# Fused cases: (shape, dtype name, bias dtype or None, with residual, store the sum, layout of x):
# "dense" channel-major; "slice", a time slice of a longer buffer like a padded conv output; "tm",
# time-major ([B, T, C] memory, the decoder's time-major layout, residual time-major too); "tm-slice",
# a time slice of a time-major buffer.
FUSED_CASES = [
    ((3, 5, 1001), "fp32", torch.float32, True, True, "dense"),
    ((3, 5, 1001), "bf16", torch.bfloat16, True, True, "slice"),
    ((2, 1536, 4), "bf16", torch.bfloat16, False, False, "dense"),
    ((4, 7, 33), "fp16", None, True, False, "slice"),
    ((2, 3, 7), "fp32", torch.float32, False, True, "dense"),
    ((3, 40, 70), "fp32", torch.float32, True, True, "tm"),
    ((2, 300, 9), "bf16", torch.bfloat16, True, True, "tm-slice"),
    ((2, 96, 50), "bf16", None, False, True, "tm"),
]


def _fused_name(case):
    shape, dname, bias_dtype, with_res, with_sum, layout = case
    return (f"fused-{dname}-{'x'.join(map(str, shape))}-bias{bias_dtype is not None:d}"
            f"-res{with_res:d}-sum{with_sum:d}-{layout}")


def _time_major(t: torch.Tensor) -> torch.Tensor:
    return t.transpose(1, 2).contiguous().transpose(1, 2)


def _fused_cases():
    cases = {}
    for i, case in enumerate(FUSED_CASES):
        shape, dname, bias_dtype, with_res, with_sum, layout = case
        x, a, b = _make_case(shape, DTYPES[dname], seed=200 + i)
        if layout.endswith("slice"):  # x[..., :T] of a [B, C, T + 6] buffer, as the decoder's padded conv gives
            wide = torch.randn(shape[0], shape[1], shape[2] + 6).to(x.dtype)
            if layout.startswith("tm"):
                wide = _time_major(wide)
            wide[..., : shape[2]] = x
            x = wide[..., : shape[2]]
        elif layout == "tm":
            x = _time_major(x)
        gen = torch.Generator().manual_seed(300 + i)
        bias = (torch.randn(shape[1], generator=gen)).to(bias_dtype) if bias_dtype is not None else None
        residual = (torch.randn(shape, generator=gen) * 2).to(x.dtype) if with_res else None
        if residual is not None and layout.startswith("tm"):
            residual = _time_major(residual)
        cases[_fused_name(case)] = (x, a, b, bias, residual, with_sum)
    return cases


def _assert_matches_reference(y: torch.Tensor, x: torch.Tensor, a: torch.Tensor, b: torch.Tensor):
    assert y.shape == x.shape and y.dtype == x.dtype
    ref32 = snake_beta_reference(x.float(), a, b)
    _assert_close_to(y, ref32)


def _assert_close_to(y: torch.Tensor, ref32: torch.Tensor):
    err = (y.float() - ref32).abs()
    # The kernel reduces x*a by pi before sin: that adds <= ~2e-7 to sin(), so <= 6e-7 to sin^2, times
    # b <= e (beta in [-1, 1]) -> ~1.7e-6; 4e-6 leaves room for the final fp32 rounding of y.
    fp32_err = 4e-6
    if y.dtype == torch.float32:
        limit = fp32_err + 2 * storage_ulp(ref32, torch.float32)
    else:
        # One ulp of the storage dtype: GPU rounds to nearest (<= 0.5 ulp) and the interpreter
        # truncates fp32 -> bf16 (< 1 ulp). Computing in bf16/fp16 instead of fp32 breaks this.
        limit = fp32_err + storage_ulp(ref32, y.dtype)
    bad = err > limit
    assert not bad.any(), (
        f"{int(bad.sum())} of {err.numel()} elements off; worst err {err.max().item():.3g} "
        f"at ref {ref32.flatten()[err.argmax()].item():.6g}"
    )


# ---------------------------------------------------------------------------------------------
# Kernel under the Triton interpreter (child process)


@pytest.fixture(scope="module")
def interpreted(tmp_path_factory):
    work_dir = tmp_path_factory.mktemp("snake_interp")
    torch.save(_all_cases(), work_dir / "cases.pt")
    torch.save(_fused_cases(), work_dir / "fused_cases.pt")
    info = run_interpreter_child(__file__, work_dir, snakebeta.CPU_TRITON_ENV, timeout=300)
    outputs = torch.load(work_dir / "outputs.pt")
    cases = {**torch.load(work_dir / "cases.pt"), **torch.load(work_dir / "fused_cases.pt")}
    return cases, outputs, info


@pytest.mark.parametrize("name", list(_all_cases()))
def test_kernel_matches_reference(interpreted, name):
    cases, outputs, info = interpreted
    assert info["is_interpreting"], "the child must run the Triton interpreter, not a GPU kernel"
    x, a, b = cases[name]
    _assert_matches_reference(outputs[f"kernel/{name}"], x, a, b)


@pytest.mark.parametrize("name", [n for n, (x, _, _) in _all_cases().items() if x.numel() <= MAX_DISPATCH_NUMEL])
def test_dispatcher_uses_triton_when_forced(interpreted, name):
    cases, outputs, info = interpreted
    assert_dispatch_equals_kernel(info, outputs, name)


def _forced_key(name, block):
    return "forced/%s/c%dt%dw%d" % ((name,) + tuple(block))


@pytest.mark.parametrize("shape, block", FORCED_CONFIGS, ids=lambda v: "x".join(map(str, v)))
def test_every_tile_shape_is_correct(interpreted, shape, block):
    cases, outputs, _ = interpreted
    for dname in ("fp32", "bf16"):
        name = f"{dname}-{'x'.join(map(str, shape))}"
        x, a, b = cases[name]
        _assert_matches_reference(outputs[_forced_key(name, block)], x, a, b)


def test_strided_and_inplace_inputs(interpreted):
    cases, outputs, _ = interpreted
    x, a, b = cases["fp32-4x7x33"]
    _assert_matches_reference(outputs["strided/time_slice"], x[:, :, 5:], a, b)
    _assert_matches_reference(outputs["strided/batch_step"], x[::2], a, b)
    _assert_matches_reference(outputs["strided/transposed"], x.transpose(1, 2).contiguous().transpose(1, 2), a, b)
    assert outputs["strided/transposed"].transpose(1, 2).is_contiguous()  # time-major in, time-major out
    _assert_matches_reference(outputs["strided/tm_time_step"], x[:, :, ::2], a, b)
    _assert_matches_reference(outputs["strided/tm_forced"], x, a, b)
    assert outputs["strided/tm_forced"].transpose(1, 2).is_contiguous()
    _assert_matches_reference(outputs["strided/inplace"], x, a, b)
    assert outputs["strided/inplace_is_x"]


@pytest.mark.parametrize("name", [_fused_name(c) for c in FUSED_CASES])
def test_fused_kernel_matches_reference(interpreted, name):
    """snake(x + bias + residual) and the stored sum, against the sum formed in fp32 in that order."""
    cases, outputs, _ = interpreted
    x, a, b, bias, residual, with_sum = cases[name]
    y, total = outputs[f"kernel/{name}"]
    ref_y, _ = snake_beta_fused_reference(x.float(), a, b, bias, residual.float() if residual is not None else None, True)
    # dense, in x's layout: time-major x gives time-major y (and sum), anything else contiguous
    dense_in_layout = (lambda t: t.transpose(1, 2).is_contiguous()) if name.endswith(("-tm", "-tm-slice")) \
        else (lambda t: t.is_contiguous())
    assert y.shape == x.shape and y.dtype == x.dtype and dense_in_layout(y)
    assert total is None or dense_in_layout(total)
    _assert_close_to(y, ref_y)
    assert (total is not None) == with_sum
    if with_sum:
        _, ref_total32 = snake_beta_fused_reference(x.float(), a, b, bias,
                                                    residual.float() if residual is not None else None, True)
        assert total.dtype == x.dtype
        if x.dtype == torch.float32:  # same fp32 additions in the same order: bit for bit
            assert torch.equal(total, ref_total32)
        else:  # one rounding to the storage dtype (the interpreter truncates: < 1 ulp)
            assert ((total.float() - ref_total32).abs() <= storage_ulp(ref_total32, x.dtype)).all()
    # The dispatcher adds nothing to the kernel's result.
    d_y, d_total = outputs[f"dispatch/{name}"]
    assert torch.equal(d_y, y) and (d_total is None) == (total is None)
    if total is not None:
        assert torch.equal(d_total, total)


# ---------------------------------------------------------------------------------------------
# Launch heuristic (pure Python)


@pytest.mark.parametrize("shape", [(64, 1536, 100), (64, 768, 800), (64, 384, 4000),
                                   (64, 192, 16000), (64, 96, 48000), (1, 1536, 8), (1, 1, 1)])
@pytest.mark.parametrize("elem_bytes", [2, 4])
@pytest.mark.parametrize("time_major", [False, True])
def test_choose_config_is_valid(shape, elem_bytes, time_major):
    num_batch, num_channels, num_samples = shape
    cfg = choose_config(num_channels, num_samples, elem_bytes, num_batch=num_batch, time_major=time_major)
    for size in (cfg.block_c, cfg.block_t, cfg.num_warps):
        assert size >= 1 and size & (size - 1) == 0, cfg
    assert cfg.block_c <= max(1, 2 * num_channels) and cfg.block_t <= max(1, 2 * num_samples)
    assert 1 <= cfg.num_warps <= snakebeta_config.MAX_NUM_WARPS


def test_choose_config_big_tiles_for_big_tensors_small_for_small():
    big = choose_config(96, 48000, 2, num_batch=64)
    assert big.block_elems > 1024, "large decoder tensors must not be capped at 1024 elements"
    assert big.block_t == snakebeta_config.MAX_BLOCK_T and big.fast_sin
    # A batch-1 first chunk is latency bound: it must be spread over many programs.
    small = choose_config(1536, 8, 2, num_batch=1)
    assert small.block_elems == MIN_ELEMS_PER_PROGRAM < big.block_elems, small
    assert not choose_config(96, 100, 4, is_cuda=False).fast_sin


def test_choose_config_time_major_tiles_run_along_channels():
    """Time-major tensors are contiguous along channels: the tile spans all of a 96..256-channel
    stage (at most MAX_BLOCK_C_TIME_MAJOR) and fills the rest with time steps."""
    cfg = choose_config(96, 48000, 2, num_batch=64, time_major=True)
    assert cfg.block_c == 128 and cfg.block_t >= 16, cfg
    wide = choose_config(1536, 100, 2, num_batch=64, time_major=True)
    assert wide.block_c == snakebeta_config.MAX_BLOCK_C_TIME_MAJOR, wide
    assert choose_config(96, 48000, 2, num_batch=64).block_t == snakebeta_config.MAX_BLOCK_T  # channel-major


def test_choose_rows_config_spreads_small_rows_and_fills_big_ones():
    big = snakebeta_config.choose_rows_config(96 * 48000, 2, num_batch=64)
    assert big.block * 2 == snakebeta_config.BYTES_PER_PROGRAM and big.num_warps == 8 and big.fast_sin
    small = snakebeta_config.choose_rows_config(1536 * 4, 2, num_batch=1)
    assert small.block == MIN_ELEMS_PER_PROGRAM
    assert not snakebeta_config.choose_rows_config(100, 4, is_cuda=False).fast_sin
    with pytest.raises(ValueError, match="positive sizes"):
        snakebeta_config.choose_rows_config(0, 2)


def test_rows_kernel_compiles_for_hopper_with_wide_loads():
    """The flat-row kernel for the decoder's 96-channel stage (sm_90, no GPU needed): x, the
    residual, y and the sum in 16-byte vectors, the channel index a constant-divisor remainder."""
    from kernels import snakebeta_triton

    skip_if_interpreting(snakebeta_triton)
    signature = {"x_ptr": "*bf16", "a_ptr": "*fp32", "b_ptr": "*fp32", "y_ptr": "*bf16", "bias_ptr": "*bf16",
                 "r_ptr": "*bf16", "s_ptr": "*bf16", "row_numel": "i32", "x_stride_b": "i32", "y_stride_b": "i32",
                 "r_stride_b": "i32", "s_stride_b": "i32", "NUM_CHANNELS": "constexpr", "BLOCK": "constexpr",
                 "FAST_SIN": "constexpr", "HAS_BIAS": "constexpr", "HAS_RESIDUAL": "constexpr",
                 "WRITE_SUM": "constexpr"}
    constants = {"NUM_CHANNELS": 96, "BLOCK": 4096, "FAST_SIN": True, "HAS_BIAS": True, "HAS_RESIDUAL": True,
                 "WRITE_SUM": True}
    divisible = list(range(12))  # pointers, the row length and the batch strides
    ptx = compile_for_hopper(snakebeta_triton._snake_beta_rows_kernel, signature, constants, divisible,
                             num_warps=8).asm["ptx"]
    assert len(re.findall(r"ld\.global[^\n]*\.v4", ptx)) >= 2 and len(re.findall(r"st\.global[^\n]*\.v4", ptx)) >= 2
    assert "sin.approx.f32" in ptx and "div.s32" not in ptx and "rem.s32" not in ptx


def test_choose_config_rejects_empty_sizes():
    with pytest.raises(ValueError, match="positive sizes"):
        choose_config(0, 10, 2)


# ---------------------------------------------------------------------------------------------
# Dispatcher fallbacks (in-process, no kernel runs)


@pytest.fixture
def fresh_dispatcher(monkeypatch):
    return fresh_route(monkeypatch, snakebeta)


def _stand_in():
    return CountingLauncher(lambda x, a, b: snake_beta_reference(x, a, b) + 1.0)  # distinguishable from eager


def test_cpu_uses_eager_without_touching_triton(fresh_dispatcher):
    forbid_triton(fresh_dispatcher, snakebeta)
    x, a, b = _make_case((2, 3, 50), torch.float32, seed=1)
    assert torch.equal(snakebeta.snake_beta(x, a, b), snake_beta_reference(x, a, b))


def test_forced_cpu_path_calls_launcher(fresh_dispatcher):
    launcher = use_launcher(fresh_dispatcher, snakebeta, _stand_in())
    x, a, b = _make_case((2, 3, 50), torch.float32, seed=1)
    assert torch.equal(snakebeta.snake_beta(x, a, b), snake_beta_reference(x, a, b) + 1.0)
    x64 = x.double()  # no kernel for fp64: eager, launcher untouched
    assert torch.equal(snakebeta.snake_beta(x64, a, b), snake_beta_reference(x64, a, b))
    assert launcher.num_calls == 1


def test_grad_path_uses_eager_and_backprops(fresh_dispatcher):
    launcher = use_launcher(fresh_dispatcher, snakebeta, _stand_in())
    x, a, b = _make_case((2, 3, 50), torch.float32, seed=2)
    x.requires_grad_(True)
    y = snakebeta.snake_beta(x, a, b)
    assert launcher.num_calls == 0 and y.requires_grad
    y.sum().backward()
    # d/dx [x + b sin^2(a x)] = 1 + a b sin(2 a x)
    expected = 1 + (a * b).view(1, -1, 1) * torch.sin(2 * a.view(1, -1, 1) * x.detach())
    torch.testing.assert_close(x.grad, expected, atol=1e-5, rtol=1e-5)
    with torch.no_grad():
        snakebeta.snake_beta(x, a, b)
    assert launcher.num_calls == 1, "without grad mode the kernel must be used"


def test_failure_is_logged_once_and_never_retried(fresh_dispatcher, caplog):
    x, a, b = _make_case((2, 3, 50), torch.float32, seed=3)
    check_failure_logged_once_and_remembered(fresh_dispatcher, caplog, snakebeta, lambda: snakebeta.snake_beta(x, a, b),
                                             equal_to(snake_beta_reference(x, a, b)))


def test_import_failure_is_recorded(fresh_dispatcher, caplog):
    x, a, b = _make_case((1, 2, 9), torch.float32, seed=4)
    check_import_failure_is_recorded(fresh_dispatcher, caplog, snakebeta, lambda: snakebeta.snake_beta(x, a, b),
                                     equal_to(snake_beta_reference(x, a, b)))


def test_real_launch_failure_falls_back(fresh_dispatcher):
    from kernels import snakebeta_triton

    x, a, b = _make_case((1, 4, 17), torch.bfloat16, seed=5)
    check_real_launch_failure_falls_back(fresh_dispatcher, snakebeta, snakebeta_triton,
                                         lambda: snakebeta.snake_beta(x, a, b), equal_to(snake_beta_reference(x, a, b)))


@pytest.mark.parametrize("bad, match", [
    (lambda x, a, b: (x[0], a, b), r"shape \[B, C, T\]"),
    (lambda x, a, b: (x, a[:-1], b), r"alpha_exp must have shape \[3\]"),
    (lambda x, a, b: (x, a, b.view(1, 3)), r"inv_beta must have shape \[3\]"),
])
def test_bad_arguments_raise_value_error(fresh_dispatcher, bad, match):
    x, a, b = _make_case((2, 3, 5), torch.float32, seed=6)
    with pytest.raises(ValueError, match=match):
        snakebeta.snake_beta(*bad(x, a, b))
    assert snakebeta.triton_failure() is None, "bad input must not disable the kernel"


def test_fused_reference_is_add_then_snake():
    """The fused reference is the unfused composition (in fp32: conv bias add, residual add, Snake)."""
    x, a, b = _make_case((2, 3, 50), torch.float32, seed=7)
    bias, residual = torch.randn(3), torch.randn(2, 3, 50)
    y, total = snake_beta_fused_reference(x, a, b, bias, residual, True)
    assert torch.equal(total, x + bias.view(1, -1, 1) + residual)
    assert torch.equal(y, snake_beta_reference(total, a, b))
    assert snake_beta_fused_reference(x, a, b, None, None, False)[1] is None


def test_fused_cpu_path_uses_eager_and_forced_path_calls_launcher(fresh_dispatcher, monkeypatch):
    x, a, b = _make_case((2, 3, 50), torch.float32, seed=8)
    bias = torch.randn(3)
    expected = snake_beta_fused_reference(x, a, b, bias, None, True)
    got = snakebeta.snake_beta_fused(x, a, b, bias=bias, return_sum=True)
    assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])
    fresh = fresh_route(monkeypatch, snakebeta, route_attr="_fused_route")
    launcher = use_launcher(fresh, snakebeta, CountingLauncher(
        lambda *args: tuple(t + 1.0 if t is not None else None for t in snake_beta_fused_reference(*args))),
        route_attr="_fused_route")
    got = snakebeta.snake_beta_fused(x, a, b, bias=bias, return_sum=True)
    assert torch.equal(got[0], expected[0] + 1.0) and launcher.num_calls == 1


@pytest.mark.parametrize("kwargs, match", [
    (lambda x: {"bias": torch.zeros(4)}, r"bias must have shape \[3\]"),
    (lambda x: {"residual": x[:, :, 1:]}, r"residual must match x"),
    (lambda x: {"residual": x.double()}, r"residual must match x"),
])
def test_fused_bad_arguments_raise_value_error(kwargs, match):
    x, a, b = _make_case((2, 3, 5), torch.float32, seed=9)
    with pytest.raises(ValueError, match=match):
        snakebeta.snake_beta_fused(x, a, b, **kwargs(x))


@pytest.mark.parametrize("dtype, fast_sin, fused, time_major", [("bf16", True, False, False), ("fp32", False, False, False),
                                                             ("bf16", True, True, False), ("bf16", True, True, True)])
def test_kernel_compiles_for_hopper(dtype, fast_sin, fused, time_major):
    """Ahead-of-time compile to an sm_90 cubin (no GPU needed): the inline asm, the libdevice sin and
    16-byte vector loads/stores along the unit-stride axis (time for channel-major tensors, channels
    for time-major ones) when the other sizes are multiples of 16, as the JIT specializes at run
    time; the fused form (bias, residual, stored sum) loads and stores its extra operands vectorized
    too."""
    from kernels import snakebeta_triton

    skip_if_interpreting(snakebeta_triton)
    unit = "c" if time_major else "t"   # the stride the JIT turns into the constant 1
    other = "t" if time_major else "c"
    signature = {"x_ptr": f"*{dtype}", "a_ptr": "*fp32", "b_ptr": "*fp32", "y_ptr": f"*{dtype}",
                 "bias_ptr": f"*{dtype}", "r_ptr": f"*{dtype}", "s_ptr": f"*{dtype}",
                 "num_channels": "i32", "num_samples": "i32"}
    for t in "xyrs":
        signature.update({f"{t}_stride_b": "i32", f"{t}_stride_c": "i32", f"{t}_stride_t": "i32"})
        signature[f"{t}_stride_{unit}"] = "constexpr"
    signature.update({name: "constexpr" for name in ("BLOCK_C", "BLOCK_T", "FAST_SIN", "HAS_BIAS", "HAS_RESIDUAL",
                                                     "WRITE_SUM")})
    names = list(signature)
    divisible = [names.index(n) for n in names if n.endswith("_ptr") or n.endswith("_stride_b")
                 or n.endswith(f"_stride_{other}")]
    divisible.append(names.index("num_channels" if time_major else "num_samples"))
    block = {"BLOCK_C": 256, "BLOCK_T": 8} if time_major else {"BLOCK_C": 4, "BLOCK_T": 2048}
    constants = {**block, "FAST_SIN": fast_sin, "HAS_BIAS": fused, "HAS_RESIDUAL": fused, "WRITE_SUM": fused,
                 **{f"{t}_stride_{unit}": 1 for t in "xyrs"}}
    kernel = compile_for_hopper(snakebeta_triton._snake_beta_kernel, signature, constants, divisible, num_warps=8)
    ptx = kernel.asm["ptx"]
    assert ("sin.approx.f32" in ptx) == fast_sin
    vector_loads = re.findall(r"ld\.global[^\n]*\.v4", ptx)
    vector_stores = re.findall(r"st\.global[^\n]*\.v4", ptx)
    assert vector_loads and vector_stores
    if fused:  # x and the residual are loaded, y and the sum stored, each as 16-byte vectors
        plain = compile_for_hopper(snakebeta_triton._snake_beta_kernel, signature,
                                   {**constants, "HAS_BIAS": False, "HAS_RESIDUAL": False, "WRITE_SUM": False},
                                   divisible, num_warps=8).asm["ptx"]
        assert len(vector_loads) > len(re.findall(r"ld\.global[^\n]*\.v4", plain))
        assert len(vector_stores) == 2 * len(re.findall(r"st\.global[^\n]*\.v4", plain))


def test_benchmark_smoke_runs(tmp_path):
    out_path = tmp_path / "snake_smoke.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_snakebeta.py"), "--smoke", "--out", str(out_path)],
        cwd=str(ROOT), capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    report = json.loads(out_path.read_text())
    assert report["smoke"] and report["triton"] and report["commit"]
    assert {tuple(r["shape"]) for r in report["results"]} == {(2, 8, 40), (1, 4, 300)}
    for row in report["results"]:
        assert row["triton_max_ulp_err"] <= 1.0 and row["triton_ms"] > 0 and row["sweep"], row


# ---------------------------------------------------------------------------------------------
# Child process body


def _run_child(work_dir: Path) -> None:
    from kernels.snakebeta_triton import is_interpreting, snake_beta_fused_triton, snake_beta_triton

    cases = torch.load(work_dir / "cases.pt")
    outputs = {}
    for name, (x, a, b) in cases.items():
        outputs[f"kernel/{name}"] = snake_beta_triton(x, a, b)
        if x.numel() <= MAX_DISPATCH_NUMEL:
            outputs[f"dispatch/{name}"] = snakebeta.snake_beta(x, a, b)
    for shape, block in FORCED_CONFIGS:
        for dname in ("fp32", "bf16"):
            name = f"{dname}-{'x'.join(map(str, shape))}"
            x, a, b = cases[name]
            cfg = SnakeConfig(block_c=block[0], block_t=block[1], num_warps=block[2], fast_sin=False)
            outputs[_forced_key(name, block)] = snake_beta_triton(x, a, b, config=cfg)
    x, a, b = cases["fp32-4x7x33"]
    outputs["strided/time_slice"] = snake_beta_triton(x[:, :, 5:], a, b)
    outputs["strided/batch_step"] = snake_beta_triton(x[::2], a, b)
    x_tm = x.transpose(1, 2).contiguous().transpose(1, 2)
    outputs["strided/transposed"] = snake_beta_triton(x_tm, a, b)                      # flat-row kernel
    outputs["strided/tm_time_step"] = snake_beta_triton(x_tm[:, :, ::2], a, b)         # rows not dense: tiles
    outputs["strided/tm_forced"] = snake_beta_triton(x_tm, a, b, config=SnakeConfig(4, 8, 1, False))
    for name, (xf, af, bf, bias, residual, with_sum) in torch.load(work_dir / "fused_cases.pt").items():
        outputs[f"kernel/{name}"] = snake_beta_fused_triton(xf, af, bf, bias, residual, with_sum)
        outputs[f"dispatch/{name}"] = snakebeta.snake_beta_fused(xf, af, bf, bias=bias, residual=residual,
                                                                 return_sum=with_sum)
    x_copy = x.clone()
    outputs["strided/inplace"] = snake_beta_triton(x_copy, a, b, out=x_copy)
    outputs["strided/inplace_is_x"] = outputs["strided/inplace"].data_ptr() == x_copy.data_ptr()
    save_child_results(work_dir, outputs, snakebeta, is_interpreting())


if __name__ == "__main__":
    child_main(_run_child)
