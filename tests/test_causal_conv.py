"""Causal conv kernel (Triton interpreter) against the cuDNN/ATen reference, its tile rule, the
dispatcher's routing, and the streaming decoder running on it.

Real launches run in one child process with TRITON_INTERPRET=1 (tests/triton_support.py); the parent
compares. The child also streams a tiny decoder with the conv and SnakeBeta kernels forced, so
streamed == offline is checked on the kernels themselves, not only on their references.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from triton_support import (CountingLauncher, assert_dispatch_equals_kernel, check_failure_logged_once_and_remembered,
                            check_import_failure_is_recorded, check_real_launch_failure_falls_back, child_main,
                            compile_for_hopper, equal_to, forbid_triton, fresh_route, run_benchmark_smoke,
                            run_interpreter_child, save_child_results, skip_if_interpreting, use_launcher)
from kernels import causal_conv
from kernels.causal_conv_config import ConvConfig, choose_conv_config
from kernels.causal_conv_reference import causal_conv1d_reference, weight_tap_major

# (B, C_in, C_out, T, K, dilation, tail, bias, dtype): the decoder's taps and dilations (7 x 1/3/9,
# the pre-conv's 3, a 1x1), T shorter than the context, T not a multiple of any tile, one output
# channel (the final conv), channel counts that are not multiples of a tile.
CASES = [
    (2, 20, 24, 37, 7, 3, True, True, "fp32"),
    (1, 40, 17, 5, 7, 9, True, False, "fp32"),
    (2, 8, 1, 50, 7, 1, False, True, "fp32"),
    (3, 33, 70, 130, 3, 1, True, True, "fp32"),
    (2, 16, 16, 40, 1, 1, False, True, "fp32"),
    (2, 24, 40, 150, 7, 9, True, True, "bf16"),
    (1, 64, 32, 3, 7, 1, True, False, "bf16"),
]
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
# Tiles smaller than the tensor on every side: several output-channel, input-channel and time tiles.
FORCED = ConvConfig(block_co=16, block_ci=16, block_t=16, num_warps=1, num_stages=1)


def _name(case) -> str:
    b, ci, co, t, k, d, tail, bias, dname = case
    return f"{dname}-b{b}-ci{ci}-co{co}-t{t}-k{k}-d{d}-tail{tail:d}-bias{bias:d}"


def _make(case, seed):
    b, ci, co, t, k, d, with_tail, with_bias, dname = case
    gen = torch.Generator().manual_seed(seed)
    dtype = DTYPES[dname]
    x = torch.randn(b, ci, t, generator=gen).to(dtype)
    weight = (torch.randn(co, ci, k, generator=gen) / (ci * k) ** 0.5).to(dtype)
    tail = torch.randn(b, ci, (k - 1) * d, generator=gen).to(dtype) if with_tail else None
    bias = torch.randn(co, generator=gen).to(dtype) if with_bias else None
    return x, weight_tap_major(weight), d, tail, bias


def _cases():
    return {_name(c): _make(c, seed=i) for i, c in enumerate(CASES)}


def _assert_close(y, args):
    x, weight_kco, d, tail, bias = args
    f32 = [t.float() if t is not None else None for t in (x, weight_kco, tail, bias)]
    ref = causal_conv1d_reference(f32[0], f32[1], d, f32[2], f32[3])
    assert y.shape == ref.shape and y.dtype == x.dtype and y.is_contiguous()
    # fp32: sums of ~C_in*K products of unit-scale terms in another order. bf16: inputs are exact in
    # fp32, the kernel accumulates in fp32 and rounds once (the interpreter truncates: < 1 ulp).
    tol = 1e-5 if x.dtype == torch.float32 else 2 ** -7
    err = (y.float() - ref).abs() / (1 + ref.abs())
    assert err.max().item() <= tol, f"max rel err {err.max().item():.3g}"


@pytest.fixture(scope="module")
def interpreted(tmp_path_factory):
    work_dir = tmp_path_factory.mktemp("conv_interp")
    torch.save(_cases(), work_dir / "cases.pt")
    info = run_interpreter_child(__file__, work_dir, causal_conv.CPU_TRITON_ENV, timeout=600)
    return torch.load(work_dir / "cases.pt"), torch.load(work_dir / "outputs.pt"), info


@pytest.mark.parametrize("name", [_name(c) for c in CASES])
def test_kernel_matches_reference(interpreted, name):
    cases, outputs, info = interpreted
    assert info["is_interpreting"]
    _assert_close(outputs[f"kernel/{name}"], cases[name])
    _assert_close(outputs[f"forced/{name}"], cases[name])


@pytest.mark.parametrize("name", [_name(c) for c in CASES])
def test_dispatcher_uses_the_kernel_when_forced(interpreted, name):
    _, outputs, info = interpreted
    assert_dispatch_equals_kernel(info, outputs, name)


def test_strided_input_and_tail(interpreted):
    """x as a time slice of a wider buffer and a channel-strided view, the tail as a slice too."""
    cases, outputs, _ = interpreted
    x, w, d, tail, bias = cases[_name(CASES[0])]
    _assert_close(outputs["strided"], (x, w, d, tail, bias))


def test_streamed_decoder_on_the_kernels_matches_offline(interpreted):
    """The tiny decoder streamed in chunks by a two-row batch (padding, slot ids), conv and SnakeBeta
    kernels forced in the interpreter, against the offline decode with the references."""
    _, outputs, info = interpreted
    assert info["conv_calls_took_kernel"] > 0 and info["snake_failure"] is None
    streamed, offline = outputs["decoder/streamed"], outputs["decoder/offline"]
    for row in range(2):
        assert (streamed[row] - offline[row]).abs().max().item() <= 1e-4


# ---------------------------------------------------------------------------------------------
# Tile rule


@pytest.mark.parametrize("c_in, c_out, t, b", [(96, 96, 48000, 64), (1536, 1536, 100, 1), (96, 1, 1920, 1),
                                              (1024, 1536, 4, 1), (8, 3, 1, 1)])
def test_choose_conv_config_is_valid(c_in, c_out, t, b):
    cfg = choose_conv_config(c_in, c_out, t, b)
    for side in (cfg.block_co, cfg.block_ci, cfg.block_t):
        assert side >= 16 and side & (side - 1) == 0, cfg
    assert cfg.block_co <= max(16, 2 * c_out) and cfg.block_t <= max(16, 2 * t)


def test_choose_conv_config_rejects_empty_sizes():
    with pytest.raises(ValueError, match="positive sizes"):
        choose_conv_config(0, 4, 4)


# ---------------------------------------------------------------------------------------------
# Dispatcher routing (in-process, stand-in launchers)


@pytest.fixture
def fresh_dispatcher(monkeypatch):
    fresh = fresh_route(monkeypatch, causal_conv)
    fresh.delenv(causal_conv.ENABLE_ENV, raising=False)
    return fresh


def _enabled(fresh):
    fresh.setenv(causal_conv.ENABLE_ENV, "1")
    return fresh


def _small():
    return _make((2, 6, 5, 20, 7, 3, True, True, "fp32"), seed=42)


def test_cpu_uses_reference_without_touching_triton(fresh_dispatcher):
    forbid_triton(fresh_dispatcher, causal_conv)
    args = _small()
    assert torch.equal(causal_conv.causal_conv1d(*args), causal_conv1d_reference(*args))


def test_kernel_is_opt_in_and_forced_cpu_path_calls_launcher(fresh_dispatcher):
    launcher = use_launcher(fresh_dispatcher, causal_conv, CountingLauncher(lambda *a: causal_conv1d_reference(*a) + 1))
    args = _small()
    assert torch.equal(causal_conv.causal_conv1d(*args), causal_conv1d_reference(*args))  # not asked for
    fresh_dispatcher.setenv(causal_conv.ENABLE_ENV, "1")
    assert torch.equal(causal_conv.causal_conv1d(*args), causal_conv1d_reference(*args) + 1)
    assert launcher.num_calls == 1


def test_grad_path_uses_reference(fresh_dispatcher):
    launcher = use_launcher(_enabled(fresh_dispatcher), causal_conv, CountingLauncher(lambda *a: causal_conv1d_reference(*a) + 1))
    x, w, d, tail, bias = _small()
    x.requires_grad_(True)
    y = causal_conv.causal_conv1d(x, w, d, tail, bias)
    assert y.requires_grad and launcher.num_calls == 0


def test_failure_is_logged_once_and_never_retried(fresh_dispatcher, caplog):
    args = _small()
    check_failure_logged_once_and_remembered(_enabled(fresh_dispatcher), caplog, causal_conv,
                                             lambda: causal_conv.causal_conv1d(*args),
                                             equal_to(causal_conv1d_reference(*args)))


def test_import_failure_is_recorded(fresh_dispatcher, caplog):
    args = _small()
    check_import_failure_is_recorded(_enabled(fresh_dispatcher), caplog, causal_conv, lambda: causal_conv.causal_conv1d(*args),
                                     equal_to(causal_conv1d_reference(*args)))


def test_real_launch_failure_falls_back(fresh_dispatcher):
    from kernels import causal_conv_triton

    args = _small()
    check_real_launch_failure_falls_back(_enabled(fresh_dispatcher), causal_conv, causal_conv_triton,
                                         lambda: causal_conv.causal_conv1d(*args),
                                         equal_to(causal_conv1d_reference(*args)))


@pytest.mark.parametrize("bad, match", [
    (lambda x, w, d, t, b: (x[0], w, d, t, b), r"x must be \[B, C_in, T\]"),
    (lambda x, w, d, t, b: (x[:, :3], w, d, t, b), r"the same C_in"),
    (lambda x, w, d, t, b: (x, w, 0, t, b), r"dilation must be >= 1"),
    (lambda x, w, d, t, b: (x, w, d, t[..., 1:], b), r"tail must be \[2, 6, 18\]"),
    (lambda x, w, d, t, b: (x, w, d, t, b[:-1]), r"bias must be \[5\]"),
])
def test_bad_arguments_raise_value_error(fresh_dispatcher, bad, match):
    with pytest.raises(ValueError, match=match):
        causal_conv.causal_conv1d(*bad(*_small()))
    assert causal_conv.triton_failure() is None


def test_kernel_compiles_for_hopper_with_tensor_cores():
    """sm_90 compile of the bf16 kernel (no GPU needed): the dots become tensor-core MMAs."""
    from kernels import causal_conv_triton

    skip_if_interpreting(causal_conv_triton)
    ints = ["c_out", "num_samples", "x_stride_b", "x_stride_c", "tail_stride_b", "tail_stride_c",
            "y_stride_b", "y_stride_c"]
    signature = {"x_ptr": "*bf16", "tail_ptr": "*bf16", "w_ptr": "*bf16", "bias_ptr": "*bf16", "y_ptr": "*bf16",
                 **{name: "i32" for name in ints},
                 **{name: "constexpr" for name in ("C_IN", "K", "DILATION", "HAS_TAIL", "HAS_BIAS", "BLOCK_CO", "BLOCK_CI",
                                                   "BLOCK_T", "DOT_FP32")}}
    constants = {"C_IN": 96, "K": 7, "DILATION": 3, "HAS_TAIL": True, "HAS_BIAS": True, "BLOCK_CO": 128, "BLOCK_CI": 32,
                 "BLOCK_T": 128, "DOT_FP32": False}
    kernel = compile_for_hopper(causal_conv_triton._causal_conv_kernel, signature, constants,
                                [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12], num_warps=8, num_stages=3)
    ptx = kernel.asm["ptx"]
    assert re.search(r"\b(mma|wgmma)\b", ptx), "bf16 dots must use tensor cores"


def test_benchmark_smoke_runs(tmp_path):
    report = run_benchmark_smoke("bench_causal_conv.py", tmp_path / "conv_smoke.json")
    assert report["smoke"] and report["commit"] and len(report["results"]) == 2
    assert all(row["max_rel_err"] < 1e-5 for row in report["results"])


# ---------------------------------------------------------------------------------------------
# Child process body


def _run_child(work_dir: Path) -> None:
    import os

    from kernels import snakebeta
    from kernels.causal_conv_triton import causal_conv1d_triton, is_interpreting

    cases = torch.load(work_dir / "cases.pt")
    outputs = {}
    os.environ[causal_conv.ENABLE_ENV] = "1"
    for name, args in cases.items():
        outputs[f"kernel/{name}"] = causal_conv1d_triton(*args)
        outputs[f"forced/{name}"] = causal_conv1d_triton(*args, config=FORCED)
        outputs[f"dispatch/{name}"] = causal_conv.causal_conv1d(*args)
    x, w, d, tail, bias = cases[_name(CASES[0])]
    wide = torch.zeros(x.shape[0], x.shape[1] * 2, x.shape[2] + 9)
    wide[:, ::2, 4 : 4 + x.shape[2]] = x
    wide_tail = torch.zeros(tail.shape[0], tail.shape[1], tail.shape[2] + 5)
    wide_tail[..., 2 : 2 + tail.shape[2]] = tail
    outputs["strided"] = causal_conv1d_triton(wide[:, ::2, 4 : 4 + x.shape[2]], w, d,
                                              wide_tail[..., 2 : 2 + tail.shape[2]], bias)
    # The decoder streamed on the kernels: every conv of the conv decoder goes through causal_conv1d.
    from test_decoder_fixtures import random_codes, tiny_code2wav
    from vocoder_service.codec import StreamingDecoder

    model = tiny_code2wav()
    codes = random_codes(2, 3, seed=7)
    os.environ[causal_conv.ENABLE_ENV] = "0"  # offline reference: cuDNN/ATen convs, eager Snake
    os.environ[snakebeta.CPU_TRITON_ENV] = "0"
    outputs["decoder/offline"] = model.decode(codes)
    os.environ[causal_conv.ENABLE_ENV] = "1"
    os.environ[snakebeta.CPU_TRITON_ENV] = "1"
    calls = []
    real = causal_conv1d_triton
    launcher = lambda *a: (calls.append(1), real(*a))[1]  # noqa: E731 (counts kernel calls)
    causal_conv._route.launcher = launcher
    decoder = StreamingDecoder(model, max_slots=3)
    decoder.reset([0, 2])
    pieces = []
    # Row 0 -> slot 2 gets 2 then 1 frames; row 1 -> slot 0 gets 1 then 2 (padded to the step's width).
    for (len_a, len_b), start in zip([(2, 1), (1, 2)], [(0, 0), (2, 1)]):
        width = max(len_a, len_b)
        step_codes = torch.zeros(2, 16, width, dtype=torch.int64)
        step_codes[0, :, :len_a] = codes[0, :, start[0] : start[0] + len_a]
        step_codes[1, :, :len_b] = codes[1, :, start[1] : start[1] + len_b]
        pcm = decoder.step(step_codes, [2, 0], [len_a, len_b])
        pieces.append((pcm[0, : len_a * 1920], pcm[1, : len_b * 1920]))
    outputs["decoder/streamed"] = torch.stack([torch.cat([p[row] for p in pieces]) for row in range(2)])
    save_child_results(work_dir, outputs, causal_conv, is_interpreting())
    import json
    info = json.loads((work_dir / "info.json").read_text())
    info.update(conv_calls_took_kernel=len(calls), snake_failure=snakebeta.triton_failure())
    (work_dir / "info.json").write_text(json.dumps(info))


if __name__ == "__main__":
    child_main(_run_child)
