"""The few-row linear's Triton kernel (CPU interpreter) vs F.linear, the dispatcher's Triton path
(one op, same bits as the kernel, a decoder layer on it), the GPU variants on CUDA, and an sm_90
compile of the GPU variant; the deferred-norm entry points too: `linear_add_` (the RESIDUAL variant:
residual += x W^T in place, rounded once) and `linear_silu_mul(..., norm_eps=)` (the GLU variant
with NORM: gate/up scaled by 1/rms(x)). The dispatcher's routing (opt-in, row limit, grad/CPU
fallbacks, failure memory, argument errors) is tested in-process with stand-in launchers in
tests/test_small_m_linear_routing.py; the inputs both use are in tests/small_m_linear_cases.py.

Kernel launches happen in one child process started with TRITON_INTERPRET=1 and
QWEN3_TTS_LINEAR_CPU_TRITON=1 (`python tests/test_small_m_linear.py --child DIR`); comparisons happen
here. Tolerances: fp32 against fp64 F.linear, 1e-5 relative to the row's sum of |x||w| (the order of
summation differs); bf16/fp16 against fp64 F.linear of the same inputs, half an ulp of the output
plus that fp32 term (the kernel sums in fp32 and rounds once). linear_add_ in the interpreter is
also equal bit for bit to round(fp32 kernel sum + residual); GLU with norm_eps to the norm-then-SwiGLU
formula (written here from torch ops) with the variance off by at most one fp32 ulp per row.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

# triton_support first: it puts the repo root on sys.path for the kernels imports below
from triton_support import (OpCounter, assert_dispatch_equals_kernel, child_main, compile_for_hopper,
                            run_benchmark_smoke, run_interpreter_child, save_child_results, skip_if_interpreting)
from kernels import small_m_linear
from kernels.small_m_linear import linear, linear_add_, linear_silu_mul
from small_m_linear_cases import (ADD_CASES, CASES, GLU_CASES, NORM_CASES, _make, _make_add, _make_glu, _make_norm,
                                  _norm_silu_mul)

HALF_ULP = {torch.float32: 2.0 ** -24, torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}


def _cases():
    cases = {name: _make(name, seed) for seed, name in enumerate(CASES)}
    cases |= {name: _make_add(name, seed) for seed, name in enumerate(ADD_CASES)}
    cases |= {name: _make_norm(name, seed) for seed, name in enumerate(NORM_CASES)}
    return cases | {name: _make_glu(name, seed) for seed, name in enumerate(GLU_CASES)}


def _add_truth(case):
    """fp64 residual + x W^T (+ b), and the per-element scale of its fp32 summation error."""
    x, weight, bias, residual = (None if t is None else t.double()
                                 for t in (case["x"], case["weight"], case["bias"], case["residual"]))
    truth = residual + F.linear(x, weight, bias)
    magnitude = x.abs() @ weight.abs().T + residual.abs() + (0 if bias is None else bias.abs())
    return truth, magnitude


def _assert_close(y, case):
    x, weight, bias = case["x"], case["weight"], case["bias"]
    truth = F.linear(x.double(), weight.double(), None if bias is None else bias.double())
    assert y.shape == truth.shape and y.dtype == x.dtype and y.is_contiguous()
    magnitude = (x.double().abs() @ weight.double().abs().T)          # sum of |x||w| per output
    bound = HALF_ULP[x.dtype] * truth.abs() + 1e-5 * magnitude + 1e-7
    if x.dtype == torch.float32:
        bound = 1e-5 * (magnitude + truth.abs()) + 1e-7
    assert bool(((y.double() - truth).abs() <= bound).all()), (y.double() - truth).abs().max().item()


@pytest.fixture(scope="module")
def interpreted(tmp_path_factory):
    work_dir = tmp_path_factory.mktemp("small_m_linear_interp")
    torch.save(_cases(), work_dir / "cases.pt")
    info = run_interpreter_child(__file__, work_dir, small_m_linear.CPU_TRITON_ENV, timeout=300)
    return torch.load(work_dir / "cases.pt"), torch.load(work_dir / "outputs.pt"), info


@pytest.mark.parametrize("name", list(CASES))
def test_kernel_matches_fp64_linear(interpreted, name):
    cases, outputs, info = interpreted
    assert info["is_interpreting"]
    _assert_close(outputs[f"kernel/{name}"], cases[name])


@pytest.mark.parametrize("name", list(GLU_CASES))
def test_glu_variant_is_silu_mul_of_the_kernel_bit_for_bit(interpreted, name):
    """One launch (projection + SwiGLU) against the two it replaces: small_m_linear then silu_mul,
    both in the interpreter. Equal to the last bit, and close to fp64 silu(gate) * up."""
    cases, outputs, _ = interpreted
    got, two_launches = outputs[f"glu/{name}"], outputs[f"glu-two-launches/{name}"]
    m, inter = GLU_CASES[name][0], GLU_CASES[name][1]
    assert got.shape == (m, inter) and got.dtype == cases[name]["x"].dtype and got.is_contiguous()
    assert torch.equal(got, two_launches)
    case = cases[name]
    gate_up = F.linear(case["x"].double(), case["weight"].double(),
                       None if case["bias"] is None else case["bias"].double())
    truth = F.silu(gate_up[:, :inter]) * gate_up[:, inter:]
    assert torch.allclose(got.double(), truth, rtol=2 ** -6, atol=1e-3)


def test_glu_dispatch_is_one_op_and_equals_the_kernel(interpreted):
    _, outputs, info = interpreted
    assert torch.equal(outputs["glu-dispatch/glu-bf16-m1"], outputs["glu/glu-bf16-m1"])
    assert torch.equal(outputs["glu-dispatch/3d"][0], outputs["glu/glu-bf16-m1"])
    launching = {op: n for op, n in info["glu_op_counts"].items() if op not in ("aten.view", "aten.reshape")}
    assert launching == {"qwen3tts.small_m_linear_silu_mul": 1}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("inter, k", [(3072, 1024), (6144, 2048)])   # the predictor's and the talker's gate/up
@pytest.mark.parametrize("rows", [1, 2])
def test_glu_on_the_gpu_matches_the_two_launches(inter, k, rows):
    """On the GPU the plain kernel may contract its sums into FMAs where the GLU launch (FMA
    contraction off, as silu_mul) does not: outputs within one bf16 ulp, nearly all equal."""
    from kernels.silu_mul_triton import silu_mul_triton
    from kernels.small_m_linear_triton import small_m_linear_silu_mul_triton, small_m_linear_triton

    gen = torch.Generator().manual_seed(7)
    x = (3 * torch.randn(rows, k, generator=gen)).bfloat16().cuda()
    weight = (torch.randn(2 * inter, k, generator=gen) / k ** 0.5).bfloat16().cuda()
    got = small_m_linear_silu_mul_triton(x, weight)
    want = silu_mul_triton(small_m_linear_triton(x, weight))
    diff = (got.float() - want.float()).abs()
    assert float((diff <= 2 ** -7 * want.float().abs() + 1e-30).float().mean()) == 1.0
    assert float((got == want).float().mean()) > 0.99


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("n, k", [(1024, 2048), (2048, 2048), (1024, 3072), (2048, 6144)])  # o_proj, down
@pytest.mark.parametrize("rows", [1, 2])
def test_linear_add_on_the_gpu(n, k, rows):
    """The talker's and the predictor's o_proj and down_proj at 1-2 rows (bf16): linear_add_ takes the
    RESIDUAL kernel by default on CUDA and updates residual in place to the fp32 sum rounded once (fp64
    reference, the kernel's usual bound). The eager path (cuBLAS addmm_, beta=1) is never worse than
    residual + F.linear: measured on an H100 (torch 2.11, cu130) it rounds once at K = 3072 and 6144
    but at K = 2048 gives exactly round(residual + round(x W^T)), up to 250 ulps off where the sum
    cancels; so it is held to either bound."""
    from kernels.small_m_linear_triton import small_m_linear_add_triton

    gen = torch.Generator().manual_seed(8)
    case = {"x": torch.randn(rows, k, generator=gen), "weight": torch.randn(n, k, generator=gen) / k ** 0.5,
            "residual": 4 * torch.randn(rows, n, generator=gen), "bias": None}
    case = {key: None if t is None else t.bfloat16().cuda() for key, t in case.items()}
    residual = case["residual"].clone()
    storage = residual.data_ptr()
    with OpCounter() as counter:
        assert linear_add_(residual, case["x"], case["weight"]) is residual
    assert residual.data_ptr() == storage and counter.counts["qwen3tts.small_m_linear_add_"] == 1
    assert torch.equal(residual, small_m_linear_add_triton(case["residual"].clone(), case["x"], case["weight"]))
    truth, magnitude = _add_truth(case)
    bound = HALF_ULP[torch.bfloat16] * truth.abs() + 1e-5 * magnitude + 1e-7
    assert bool(((residual.double() - truth).abs() <= bound).all()), (residual.double() - truth).abs().max().item()
    eager = case["residual"].clone().addmm_(case["x"], case["weight"].t())
    twice = case["residual"].double() + F.linear(case["x"], case["weight"]).double()   # the GEMM rounded first
    once_ok = (eager.double() - truth).abs() <= bound
    twice_ok = (eager.double() - twice).abs() <= HALF_ULP[torch.bfloat16] * twice.abs() + 1e-7
    assert bool((once_ok | twice_ok).all())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("inter, k", [(3072, 1024), (6144, 2048)])   # the predictor's and the talker's gate/up
@pytest.mark.parametrize("rows", [1, 2])
def test_glu_with_norm_eps_on_the_gpu(inter, k, rows):
    """The GLU+NORM launch (bf16, the models' gate/up) against the formula from torch CUDA ops on the
    plain kernel's gate/up: the variance's summation order, tl.rsqrt vs torch's rsqrt and the plain
    kernel's FMA contraction each can move a scaled gate/up by one bf16 ulp, so nearly all equal and
    the rest close; and close to fp64."""
    from kernels.small_m_linear_triton import small_m_linear_silu_mul_triton, small_m_linear_triton

    gen = torch.Generator().manual_seed(9)
    x = (3 * torch.randn(rows, k, generator=gen)).bfloat16().cuda()
    weight = (torch.randn(2 * inter, k, generator=gen) / k ** 0.5).bfloat16().cuda()
    eps = 1e-6
    got = small_m_linear_silu_mul_triton(x, weight, None, eps)
    assert torch.equal(linear_silu_mul(x, weight, norm_eps=eps), got)
    scale = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)
    gate, up = (small_m_linear_triton(x, weight).float() * scale).bfloat16().chunk(2, dim=-1)
    want = F.silu(gate) * up
    assert float((got == want).float().mean()) > 0.99
    torch.testing.assert_close(got.float(), want.float(), rtol=2 ** -6, atol=2 ** -10)
    x64 = x.double()
    scaled = F.linear(x64, weight.double()) * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + eps)
    truth = F.silu(scaled[:, :inter]) * scaled[:, inter:]
    assert torch.allclose(got.double(), truth, rtol=2 ** -6, atol=1e-3)


@pytest.mark.parametrize("name", [n for n, c in CASES.items() if not c[5]])
def test_dispatcher_uses_the_kernel_when_asked(interpreted, name):
    _, outputs, info = interpreted
    assert_dispatch_equals_kernel(info, outputs, name)
    launching = {op: n for op, n in info["triton_path_op_counts"].items() if op not in ("aten.view", "aten.reshape")}
    assert launching == {"qwen3tts.small_m_linear": 1}   # one op, no GEMM beside it (views are metadata)


def _decoder_layer():
    """A seeded bf16 DecoderLayer (fused projections) and one decode token's inputs."""
    from talker_service.model.config import DecoderStackConfig
    from talker_service.model.layers import DecoderLayer

    config = DecoderStackConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=1, num_attention_heads=4,
                                num_key_value_heads=2, head_dim=16, vocab_size=16, num_code_groups=4,
                                rms_norm_eps=1e-6, rope_theta=10000.0, attention_bias=False)
    gen = torch.Generator().manual_seed(5)
    layer = DecoderLayer(config, 0)
    with torch.no_grad():
        for param in layer.parameters():
            noise = torch.randn(param.shape, generator=gen)
            param.copy_(noise / param.shape[1] ** 0.5 if param.dim() == 2 else 1.0 + 0.25 * noise)
    layer = layer.to(torch.bfloat16).eval()
    layer.self_attn.fuse_projections()
    layer.mlp.fuse_projections()

    class _KV:
        def update(self, layer_idx, k, v):
            return k, v

    x = torch.randn(1, 1, 64, generator=gen).to(torch.bfloat16)
    cos, sin = torch.ones(1, 1, 16, dtype=torch.bfloat16), torch.zeros(1, 1, 16, dtype=torch.bfloat16)
    return layer, (x, cos, sin, _KV(), None)


def test_decoder_layer_on_the_kernel_matches_cublas_path(interpreted):
    """The layer's four projections on the kernel (bf16, fp32 sums, one rounding each) against the
    F.linear path (which also sums in fp32 and rounds once)."""
    _, outputs, _ = interpreted
    on, off = outputs["layer/on"].float(), outputs["layer/off"].float()
    assert on.shape == off.shape == (1, 1, 64)
    # measured: equal; allow one bf16 ulp of the largest output for a BLAS that sums in another order
    assert (on - off).abs().max().item() <= 2 ** -7 * off.abs().max().item()


def test_three_dim_input_keeps_its_shape(interpreted):
    _, outputs, _ = interpreted
    got = outputs["dispatch/3d"]
    assert got.shape == (1, 1, 50)
    assert torch.equal(got[0], outputs["kernel/bf16-m1"])


@pytest.mark.parametrize("name", list(ADD_CASES))
def test_linear_add_kernel_is_in_place_and_rounds_once(interpreted, name):
    """linear_add_ through the dispatcher (the RESIDUAL kernel): the same tensor comes back, its
    storage updated; the value is the fp32 sum of the kernel plus the residual, rounded once (bit for
    bit: the fp32 kernel on the widened inputs, + residual in fp32, cast), and close to fp64 by the
    kernel's usual bound. The launcher called directly gives the same bits."""
    cases, outputs, info = interpreted
    case = cases[name]
    got = outputs[f"add-dispatch/{name}"]
    assert info["add_in_place"][name] == [True, True]   # `out is residual`, same data_ptr
    assert got.shape == case["residual"].shape and got.dtype == case["residual"].dtype
    assert not torch.equal(got, case["residual"])
    assert torch.equal(got, outputs[f"add-kernel/{name}"])
    assert torch.equal(got, outputs[f"add-once/{name}"])
    truth, magnitude = _add_truth(case)
    bound = HALF_ULP[got.dtype] * truth.abs() + 1e-5 * magnitude + 1e-7
    if got.dtype == torch.float32:
        bound = 1e-5 * (magnitude + truth.abs()) + 1e-7
    assert bool(((got.double() - truth).abs() <= bound).all()), (got.double() - truth).abs().max().item()


def test_linear_add_dispatch_is_one_op_and_keeps_leading_dims(interpreted):
    cases, outputs, info = interpreted
    name = "add-bf16-m1-k1024"
    got = outputs["add-dispatch/3d"]
    assert got.shape == (1, 1, 48) and info["add_3d_in_place"]
    assert torch.equal(got[0], outputs[f"add-dispatch/{name}"])
    launching = {op: n for op, n in info["add_op_counts"].items() if op not in ("aten.view", "aten.reshape")}
    assert launching == {"qwen3tts.small_m_linear_add_": 1}


@pytest.mark.parametrize("name", list(NORM_CASES))
def test_glu_with_norm_eps_is_the_norm_then_swiglu(interpreted, name):
    """The GLU+NORM launch against gate/up from the plain kernel, scaled by 1/rms(x) and SwiGLU'd by
    torch ops (_norm_silu_mul). The kernel sums x^2 per slice then across slices, torch's mean in
    its own order, so the variance may differ in its last fp32 bit: every row equals the formula
    with the variance moved by at most one fp32 ulp, and in bf16/fp16 nearly every element equals
    it unmoved (in fp32 a moved variance moves the whole row's scale, so only the first holds)."""
    cases, outputs, _ = interpreted
    case = cases[name]
    got, gate_up = outputs[f"norm/{name}"], outputs[f"norm-gate-up/{name}"]
    m, inter = NORM_CASES[name][:2]
    assert got.shape == (m, inter) and got.dtype == case["x"].dtype and got.is_contiguous()
    for row in range(m):
        assert any(torch.equal(got[row], _norm_silu_mul(gate_up[row:row + 1], case["x"][row:row + 1],
                                                        case["eps"], ulps)[0])
                   for ulps in (0, -1, 1)), (name, row)
    want = _norm_silu_mul(gate_up, case["x"], case["eps"])
    if got.dtype != torch.float32:
        assert float((got == want).float().mean()) > 0.98
    # and close to fp64: silu(s * x W^T [:I]) * (s * x W^T [I:])
    x64 = case["x"].double()
    scaled = F.linear(x64, case["weight"].double()) * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + case["eps"])
    truth = F.silu(scaled[:, :inter]) * scaled[:, inter:]
    assert torch.allclose(got.double(), truth, rtol=2 ** -6, atol=1e-3 if got.dtype != torch.float32 else 1e-5)


def test_glu_with_norm_eps_dispatch_is_one_op(interpreted):
    _, outputs, info = interpreted
    assert torch.equal(outputs["norm-dispatch/norm-bf16-m1-k1024"], outputs["norm/norm-bf16-m1-k1024"])
    assert torch.equal(outputs["norm-dispatch/3d"][0], outputs["norm/norm-bf16-m1-k1024"])
    launching = {op: n for op, n in info["norm_op_counts"].items() if op not in ("aten.view", "aten.reshape")}
    assert launching == {"qwen3tts.small_m_linear_silu_mul": 1}


# ---------------------------------------------------------------------------------------------
# Ahead-of-time compile for Hopper (no GPU needed)


@pytest.mark.parametrize("dtype, m, n, k, variant", [
    ("bf16", 1, 1024, 1024, None), ("bf16", 1, 12288, 2048, None), ("bf16", 8, 4096, 2048, None),
    ("fp32", 1, 2048, 6144, None), ("bf16", 1, 6144, 2048, "glu"), ("bf16", 1, 3072, 1024, "glu"),
    ("bf16", 1, 3072, 1024, "glu-norm"), ("bf16", 2, 6144, 2048, "glu-norm"),
    ("bf16", 1, 1024, 2048, "residual"), ("bf16", 2, 2048, 6144, "residual")])
def test_kernel_compiles_for_hopper_with_wide_loads(dtype, m, n, k, variant, monkeypatch):
    """sm_90 compiles of the blocks choose_blocks picks for the models' shapes: the weight stream in
    128-bit loads (8 bf16 / 4 fp32 a thread), never element by element; with a bias too. GLU (the
    talker's and the predictor's gate/up at one row, n = I): the same loads for both halves, and
    silu's correctly rounded divide; with NORM (no bias) also the variance's correctly rounded divide.
    RESIDUAL (o_proj and down at 1-2 rows): the weight stream unchanged by the epilogue's read."""
    from kernels import small_m_linear_triton as smt

    skip_if_interpreting(smt)
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "1")
    glu = variant in ("glu", "glu-norm")
    block_m, block_n, block_k, num_warps = smt.choose_blocks(m, n, k, tiles=2 if glu else 1)
    signature = {"x_ptr": f"*{dtype}", "w_ptr": f"*{dtype}", "b_ptr": f"*{dtype}", "y_ptr": f"*{dtype}",
                 "M": "i32", "N": "i32", "K": "i32", "stride_xm": "i32", "stride_wn": "i32", "stride_ym": "i32",
                 "k_float": "fp32", "eps": "fp32"}
    names = list(signature) + ["BLOCK_M", "BLOCK_N", "BLOCK_K", "HAS_BIAS"]
    # pointers, strides, N and K 16-divisible, as the JIT specializes the models' shapes at run time
    divisible = [i for i, name in enumerate(names)
                 if name.endswith("_ptr") or name.startswith("stride") or name in ("N", "K")]
    for has_bias in (False,) if variant == "glu-norm" else (False, True):
        constants = {"BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k, "HAS_BIAS": has_bias, "GLU": glu,
                     "NORM": variant == "glu-norm", "RESIDUAL": variant == "residual", "EXP64": False}
        options = {"enable_fp_fusion": False} if glu else {}   # as the GLU launcher passes it
        kernel = compile_for_hopper(smt._small_m_linear_kernel, {**signature, **dict.fromkeys(constants, "constexpr")},
                                    constants, divisible, num_warps=num_warps, **options)
        if not has_bias:
            ptx = kernel.asm["ptx"]
            assert "ld.global.v4" in ptx
            scalar = re.findall(r"ld\.global(?:\.nc)?\.(?:b16|u16|b32|u32|f32)\s", ptx)
            if variant == "residual":   # one more load, of the residual tile (BLOCK_M x BLOCK_N <= 4 here)
                plain = compile_for_hopper(smt._small_m_linear_kernel,
                                           {**signature, **dict.fromkeys(constants, "constexpr")},
                                           constants | {"RESIDUAL": False}, divisible, num_warps=num_warps).asm["ptx"]
                assert block_m * block_n <= 4 and len(scalar) == 1, scalar
                assert ptx.count("ld.global.v4") == plain.count("ld.global.v4")   # the weight stream as before
            else:
                assert not scalar, "scalar loads"
            if glu:
                assert "div.rn.f32" in ptx   # silu's correctly rounded divide, as in silu_mul
            if variant == "glu-norm":
                assert "rsqrt.approx" in ptx


def test_choose_blocks():
    from kernels.small_m_linear_triton import choose_blocks

    assert choose_blocks(1, 1024, 1024) == (1, 1, 1024, 4)      # predictor o/down: 1024 programs
    assert choose_blocks(1, 12288, 2048) == (1, 8, 2048, 8)     # talker gate/up: 1536 programs
    assert choose_blocks(8, 4096, 2048) == (8, 4, 2048, 8)
    assert choose_blocks(1, 2048, 6144) == (1, 2, 8192, 8)      # talker down: K padded to one slice
    assert choose_blocks(3, 10, 20000) == (4, 1, 8192, 8)       # K past one slice: the kernel loops


def test_benchmark_smoke_runs(tmp_path):
    """benchmarks/bench_small_m_linear.py --smoke: the interpreter, tiny shapes, results checked."""
    report = run_benchmark_smoke("bench_small_m_linear.py", tmp_path / "gemv_smoke.json")
    assert report["smoke"] and report["commit"] and len(report["results"]) == 2 * 4   # 2 shapes x 4 row counts
    assert all(row["max_rel_err"] < 1e-5 for row in report["results"])


# ---------------------------------------------------------------------------------------------
# Child process body


def _run_child(work_dir: Path) -> None:
    import os

    from kernels.silu_mul_triton import silu_mul_triton
    from kernels.small_m_linear_triton import (is_interpreting, small_m_linear_add_triton,
                                               small_m_linear_silu_mul_triton, small_m_linear_triton)

    cases = torch.load(work_dir / "cases.pt")
    outputs = {}
    extra_info = {"add_in_place": {}}
    os.environ[small_m_linear.ENABLE_ENV] = "1"
    for name in ADD_CASES:
        case = cases.pop(name)
        args = (case["x"], case["weight"], case["bias"])
        residual = case["residual"].clone()
        storage = residual.data_ptr()
        got = linear_add_(residual, *args)
        extra_info["add_in_place"][name] = [got is residual, got.data_ptr() == storage]
        outputs[f"add-dispatch/{name}"] = got
        outputs[f"add-kernel/{name}"] = small_m_linear_add_triton(case["residual"].clone(), *args)
        widened = [None if t is None else t.float() for t in args]   # the kernel's fp32 sum, unrounded
        outputs[f"add-once/{name}"] = (small_m_linear_triton(*widened) + case["residual"].float()).to(got.dtype)
        if name == "add-bf16-m1-k1024":
            residual3 = case["residual"].clone()[None]
            extra_info["add_3d_in_place"] = linear_add_(residual3, case["x"][None], *args[1:]) is residual3
            outputs["add-dispatch/3d"] = residual3
            residual = case["residual"].clone()
            with torch.no_grad(), OpCounter() as add_counter:
                linear_add_(residual, *args)
    for name in NORM_CASES:
        case = cases.pop(name)
        x, weight, eps = case["x"], case["weight"], case["eps"]
        outputs[f"norm/{name}"] = small_m_linear_silu_mul_triton(x, weight, None, eps)
        outputs[f"norm-gate-up/{name}"] = small_m_linear_triton(x, weight)
        if name == "norm-bf16-m1-k1024":
            outputs[f"norm-dispatch/{name}"] = linear_silu_mul(x, weight, norm_eps=eps)
            outputs["norm-dispatch/3d"] = linear_silu_mul(x[None], weight, norm_eps=eps)
            with torch.no_grad(), OpCounter() as norm_counter:
                linear_silu_mul(x, weight, norm_eps=eps)
    for name in GLU_CASES:
        case = cases.pop(name)
        outputs[f"glu/{name}"] = small_m_linear_silu_mul_triton(case["x"], case["weight"], case["bias"],
                                                                **case["kwargs"])
        outputs[f"glu-two-launches/{name}"] = silu_mul_triton(small_m_linear_triton(case["x"], case["weight"],
                                                                                    case["bias"]))
        if name == "glu-bf16-m1":
            outputs[f"glu-dispatch/{name}"] = linear_silu_mul(case["x"], case["weight"], case["bias"])
            outputs["glu-dispatch/3d"] = linear_silu_mul(case["x"][None], case["weight"], case["bias"])
            with torch.no_grad(), OpCounter() as glu_counter:
                linear_silu_mul(case["x"], case["weight"], case["bias"])
    for name, case in cases.items():
        outputs[f"kernel/{name}"] = small_m_linear_triton(case["x"], case["weight"], case["bias"], **case["kwargs"])
        if not case["kwargs"]:
            outputs[f"dispatch/{name}"] = linear(case["x"], case["weight"], case["bias"])
    case = cases["bf16-m1"]
    outputs["dispatch/3d"] = linear(case["x"][None], case["weight"], case["bias"])
    # a bf16 decoder layer at batch 1 (fused qkv, o, fused gate/up, down through the kernel) and off
    layer, inputs = _decoder_layer()
    with torch.no_grad():
        outputs["layer/on"] = layer(*inputs)
        os.environ[small_m_linear.ENABLE_ENV] = "0"
        outputs["layer/off"] = layer(*inputs)
        os.environ[small_m_linear.ENABLE_ENV] = "1"
    with torch.no_grad(), OpCounter() as counter:
        linear(case["x"], case["weight"], case["bias"])
    save_child_results(work_dir, outputs, small_m_linear, is_interpreting(), counter)
    info_path = work_dir / "info.json"
    info = json.loads(info_path.read_text()) | extra_info | {
        "glu_op_counts": dict(glu_counter.counts), "add_op_counts": dict(add_counter.counts),
        "norm_op_counts": dict(norm_counter.counts)}
    info_path.write_text(json.dumps(info))


if __name__ == "__main__":
    child_main(_run_child)