"""The few-row linear: Triton kernel (CPU interpreter) vs F.linear, the `linear` dispatcher's routing
(opt-in, row limit, compile/grad/CPU fallbacks), and an sm_90 compile of the GPU variant; the deferred-
norm entry points too: `linear_add_` (the RESIDUAL variant: residual += x W^T in place, rounded once)
and `linear_silu_mul(..., norm_eps=)` (the GLU variant with NORM: gate/up scaled by 1/rms(x)).

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
from triton_support import (CountingLauncher, OpCounter, assert_dispatch_equals_kernel, child_main,
                            compile_for_hopper, fresh_route, run_benchmark_smoke, run_interpreter_child,
                            save_child_results, skip_if_interpreting, use_launcher)
from kernels import small_m_linear
from kernels.silu_mul import silu_mul
from kernels.small_m_linear import linear, linear_add_, linear_silu_mul

HALF_ULP = {torch.float32: 2.0 ** -24, torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}
# (M, N, K, bias, dtype, kwargs): 1, 3, 5, 8 and 16 rows; N not a multiple of any tile; K not a
# power of two (96, 80) and K past one slice (8200: the slice loop runs twice); x with a row stride
# other than K; block_n and num_warps overridden
CASES = {
    "fp32-m1": (1, 37, 64, True, torch.float32, {}),
    "fp32-m2-k8200": (2, 5, 8200, True, torch.float32, {}),
    "fp32-m8-k96": (8, 20, 96, False, torch.float32, {}),
    "bf16-m1": (1, 50, 128, True, torch.bfloat16, {}),
    "bf16-m5-bn4": (5, 33, 80, True, torch.bfloat16, {"block_n": 4}),
    "fp16-m16": (16, 24, 64, False, torch.float16, {"num_warps": 2}),
    "bf16-m3-strided": (3, 40, 64, True, torch.bfloat16, {}),
}


def _make(name, seed):
    m, n, k, with_bias, dtype, kwargs = CASES[name]
    gen = torch.Generator().manual_seed(seed)
    if name.endswith("strided"):   # x as the first K columns of a wider buffer: row stride != K
        x = torch.randn(m, k + 16, generator=gen).to(dtype)[:, :k]
    else:
        x = torch.randn(m, k, generator=gen).to(dtype)
    weight = (torch.randn(n, k, generator=gen) / k ** 0.5).to(dtype)
    bias = torch.randn(n, generator=gen).to(dtype) if with_bias else None
    return {"x": x, "weight": weight, "bias": bias, "kwargs": kwargs}


# the GLU variant (fused gate/up weight [2I, K] -> silu(gate) * up [M, I]): (M, I, K, bias, dtype, kwargs)
GLU_CASES = {
    "glu-bf16-m1": (1, 48, 128, False, torch.bfloat16, {}),
    "glu-bf16-m3-bias": (3, 40, 96, True, torch.bfloat16, {}),
    "glu-fp16-m2-bn2": (2, 33, 64, True, torch.float16, {"block_n": 2}),
    "glu-fp32-m1-k8200": (1, 12, 8200, False, torch.float32, {}),
}


def _make_glu(name, seed):
    m, inter, k, with_bias, dtype, kwargs = GLU_CASES[name]
    gen = torch.Generator().manual_seed(100 + seed)
    # x scaled by 3: gate sums spread over silu's curved part and both of its tails
    x = (3 * torch.randn(m, k, generator=gen)).to(dtype)
    weight = (torch.randn(2 * inter, k, generator=gen) / k ** 0.5).to(dtype)
    bias = torch.randn(2 * inter, generator=gen).to(dtype) if with_bias else None
    return {"x": x, "weight": weight, "bias": bias, "kwargs": kwargs}


# linear_add_ (residual [M, N] += x W^T (+ b)): (M, N, K, bias, dtype); every dtype at K = 1024 (one
# slice) and K = 8200 (two), with and without a bias, 1-3 rows
ADD_CASES = {
    f"add-{tag}-m{m}-k{k}{'-bias' if with_bias else ''}": (m, n, k, with_bias, dtype)
    for tag, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16), ("fp32", torch.float32))
    for (m, n, k, with_bias) in ((1, 48, 1024, False), (3, 20, 1024, True), (2, 12, 8200, False), (3, 10, 8200, True))
}


def _make_add(name, seed):
    m, n, k, with_bias, dtype = ADD_CASES[name]
    gen = torch.Generator().manual_seed(200 + seed)
    return {"residual": (4 * torch.randn(m, n, generator=gen)).to(dtype), "x": torch.randn(m, k, generator=gen).to(dtype),
            "weight": (torch.randn(n, k, generator=gen) / k ** 0.5).to(dtype),
            "bias": torch.randn(n, generator=gen).to(dtype) if with_bias else None}


# GLU with a deferred norm (x un-normalised, bias-free): (M, I, K, dtype, x scale, eps); the last
# with an eps the size of the variance, so a wrong eps shows
NORM_CASES = {
    "norm-bf16-m1-k1024": (1, 48, 1024, torch.bfloat16, 3.0, 1e-6),
    "norm-bf16-m2-k8200": (2, 20, 8200, torch.bfloat16, 3.0, 1e-6),
    "norm-fp16-m2-k1024": (2, 40, 1024, torch.float16, 3.0, 1e-6),
    "norm-fp16-m1-k8200": (1, 24, 8200, torch.float16, 3.0, 1e-6),
    "norm-fp32-m1-k1024": (1, 40, 1024, torch.float32, 3.0, 1e-6),
    "norm-fp32-m2-k8200": (2, 12, 8200, torch.float32, 3.0, 1e-6),
    "norm-bf16-m2-k1024-eps": (2, 32, 1024, torch.bfloat16, 0.5, 0.25),
}


def _make_norm(name, seed):
    m, inter, k, dtype, scale, eps = NORM_CASES[name]
    gen = torch.Generator().manual_seed(300 + seed)
    # gate/up sums ~ scale * N(0, 1), then scaled by ~1/scale: silu's curved part and both tails
    return {"x": (scale * torch.randn(m, k, generator=gen)).to(dtype),
            "weight": (torch.randn(2 * inter, k, generator=gen) / k ** 0.5).to(dtype), "eps": eps}


def _cases():
    cases = {name: _make(name, seed) for seed, name in enumerate(CASES)}
    cases |= {name: _make_add(name, seed) for seed, name in enumerate(ADD_CASES)}
    cases |= {name: _make_norm(name, seed) for seed, name in enumerate(NORM_CASES)}
    return cases | {name: _make_glu(name, seed) for seed, name in enumerate(GLU_CASES)}


def _norm_silu_mul(gate_up, x, eps, variance_ulps=0):
    """The deferred norm + SwiGLU from torch ops (independent of kernels/silu_mul*.py): s =
    rsqrt(mean(x32^2) + eps) per row, gate_up scaled in fp32 and rounded to its dtype, then silu(gate)
    rounded and * up rounded, with exp correctly rounded to fp32 (fp64, as the interpreter's EXP64 and,
    for bf16/fp16, CPU F.silu). variance_ulps moves mean(x32^2) by that many fp32 ulps first."""
    var = x.float().pow(2).mean(-1, keepdim=True)
    for _ in range(abs(variance_ulps)):
        var = torch.nextafter(var, torch.full_like(var, float("inf") if variance_ulps > 0 else 0.0))
    gate_up = (gate_up.float() * torch.rsqrt(var + eps)).to(gate_up.dtype)
    gate, up = gate_up.float().chunk(2, dim=-1)
    silu = (gate / (1 + torch.exp(-gate.double()).float())).to(gate_up.dtype)
    return (silu.float() * up).to(gate_up.dtype)


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


def test_glu_off_is_linear_then_silu_mul(fresh_dispatcher):
    case = _make_glu("glu-bf16-m3-bias", 1)
    with OpCounter() as counter:
        got = linear_silu_mul(case["x"], case["weight"], case["bias"])   # CPU, not asked for: no kernel
    assert torch.equal(got, silu_mul(F.linear(case["x"], case["weight"], case["bias"])))
    assert "qwen3tts.small_m_linear_silu_mul" not in counter.counts
    odd = torch.randn(5, 8)   # no gate/up halves: the plain path raises silu_mul's own error
    with pytest.raises((ValueError, RuntimeError)):
        linear_silu_mul(torch.randn(1, 8), odd)


def test_a_failing_glu_launch_falls_back_and_leaves_the_plain_kernel_on(fresh_dispatcher):
    fresh_route(fresh_dispatcher, small_m_linear, "_glu_route")
    plain = _stand_in(fresh_dispatcher)
    failing = use_launcher(fresh_dispatcher, small_m_linear, CountingLauncher(None, error=RuntimeError("no ptxas")),
                           "_glu_route")
    case = _make_glu("glu-bf16-m1", 0)
    want = silu_mul(F.linear(case["x"], case["weight"], case["bias"]))
    assert torch.equal(linear_silu_mul(case["x"], case["weight"], case["bias"]), want)   # the reference answered
    assert "no ptxas" in small_m_linear.glu_triton_failure()
    assert torch.equal(linear_silu_mul(case["x"], case["weight"], case["bias"]), want)
    assert failing.num_calls == 1                                   # remembered: not tried again
    assert small_m_linear.triton_failure() is None
    x, weight = torch.randn(1, 8), torch.randn(6, 8)
    assert torch.equal(linear(x, weight), F.linear(x, weight) + 1) and plain.num_calls == 1


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
# Routing (in-process, stand-in launchers)


@pytest.fixture
def fresh_dispatcher(monkeypatch):
    fresh = fresh_route(monkeypatch, small_m_linear)
    fresh.delenv(small_m_linear.ENABLE_ENV, raising=False)
    return fresh


def _stand_in(fresh):
    fresh.setenv(small_m_linear.ENABLE_ENV, "1")
    return use_launcher(fresh, small_m_linear, CountingLauncher(lambda x, w, b: F.linear(x, w, b) + 1))


def test_off_by_default_on_cpu_is_plain_linear(fresh_dispatcher):
    case = _make("fp32-m1", 0)
    with OpCounter() as counter:
        y = linear(case["x"], case["weight"], case["bias"])
    assert torch.equal(y, F.linear(case["x"], case["weight"], case["bias"]))
    assert "qwen3tts.small_m_linear" not in counter.counts


class _CudaLooking:
    is_cuda = True
    device = torch.device("cuda")


@pytest.mark.parametrize("setting, cuda_rows, cpu_rows", [(None, 2, 0), ("", 2, 0), ("yes", 2, 0), ("0", 0, 0),
                                                         ("1", 16, 16)])
def test_row_limit_per_setting(fresh_dispatcher, setting, cuda_rows, cpu_rows):
    """Unset (or any other value): up to two rows, on CUDA only (the measured win); "0" never; "1" up to
    MAX_ROWS anywhere (the op itself still keeps CPU tensors on F.linear without the CPU variable)."""
    if setting is not None:
        fresh_dispatcher.setenv(small_m_linear.ENABLE_ENV, setting)
    assert small_m_linear.max_rows_for(_CudaLooking()) == cuda_rows
    assert small_m_linear.max_rows_for(torch.zeros(1)) == cpu_rows
    assert small_m_linear.max_rows_on(torch.device("cuda")) == cuda_rows   # what the talker's graphs ask


def test_zero_turns_the_kernel_off(fresh_dispatcher):
    launcher = _stand_in(fresh_dispatcher)
    fresh_dispatcher.setenv(small_m_linear.ENABLE_ENV, "0")
    x, weight = torch.randn(1, 8), torch.randn(6, 8)
    assert torch.equal(linear(x, weight), F.linear(x, weight))
    assert launcher.num_calls == 0


def test_asked_for_takes_the_launcher_up_to_the_row_limit(fresh_dispatcher):
    launcher = _stand_in(fresh_dispatcher)
    weight = torch.randn(6, 8)
    small, big = torch.randn(2, 3, 8), torch.randn(17, 8)
    assert torch.equal(linear(small, weight), F.linear(small, weight) + 1)   # 6 rows, [2, 3, 8] kept
    assert torch.equal(linear(big, weight), F.linear(big, weight))          # 17 rows: cuBLAS
    assert launcher.num_calls == 1


def test_grad_dtype_and_empty_inputs_fall_back(fresh_dispatcher):
    launcher = _stand_in(fresh_dispatcher)
    weight = torch.randn(6, 8, requires_grad=True)
    x = torch.randn(1, 8)
    y = linear(x, weight)                       # gradients wanted: F.linear, differentiable
    y.sum().backward()
    assert weight.grad is not None
    with torch.no_grad():
        assert torch.equal(linear(x.double(), weight.double()), F.linear(x.double(), weight.double()))
        assert linear(torch.randn(0, 8), weight).shape == (0, 6)
    assert launcher.num_calls == 0


def test_cpu_without_the_cpu_env_never_loads_triton(fresh_dispatcher):
    fresh_dispatcher.setenv(small_m_linear.ENABLE_ENV, "1")
    fresh_dispatcher.setattr(small_m_linear._route, "get_launcher", lambda: pytest.fail("Triton path taken on CPU"))
    case = _make("bf16-m1", 2)
    assert torch.equal(linear(case["x"], case["weight"], case["bias"]),
                       F.linear(case["x"], case["weight"], case["bias"]))


def _stand_in_add(fresh):
    """The add op's launcher as a stand-in (residual += F.linear + 1, in place), the kernel asked for."""
    fresh.setenv(small_m_linear.ENABLE_ENV, "1")
    fresh_route(fresh, small_m_linear, "_add_route")
    return use_launcher(fresh, small_m_linear, CountingLauncher(lambda r, x, w, b: r.add_(F.linear(x, w, b) + 1)),
                        "_add_route")


@pytest.mark.parametrize("with_bias", [False, True])
def test_linear_add_eager_path_is_in_place(fresh_dispatcher, with_bias):
    """CPU, nothing asked for: no op, the eager path. Without a bias one addmm_ into residual (no
    copy: the BLAS adds C itself); with one, residual.add_(F.linear(...)). Both equal residual +
    F.linear in fp32 (to fp32 rounding: addmm may add C inside its sum), in place, same tensor back."""
    gen = torch.Generator().manual_seed(11)
    x, weight = torch.randn(2, 3, 64, generator=gen), torch.randn(24, 64, generator=gen) / 8
    bias = torch.randn(24, generator=gen) if with_bias else None
    residual = torch.randn(2, 3, 24, generator=gen)
    want = residual + F.linear(x, weight, bias)
    storage = residual.data_ptr()
    with OpCounter() as counter:
        got = linear_add_(residual, x, weight, bias)
    assert got is residual and got.data_ptr() == storage
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    assert not any(op.startswith("qwen3tts.") for op in counter.counts)
    if with_bias:
        assert torch.equal(got, want)   # the same two roundings
    else:
        assert counter.counts["aten.addmm_"] == 1 and "aten.copy_" not in counter.counts and "aten.add_" not in counter.counts


def test_linear_add_takes_its_op_up_to_the_row_limit(fresh_dispatcher):
    launcher = _stand_in_add(fresh_dispatcher)
    weight = torch.randn(6, 8)
    small, big = torch.randn(2, 3, 8), torch.randn(17, 8)
    r_small, r_big = torch.zeros(2, 3, 6), torch.zeros(17, 6)
    assert linear_add_(r_small, small, weight) is r_small
    assert torch.equal(r_small, F.linear(small, weight) + 1)                # 6 rows: the op, [2, 3, 6] kept
    assert linear_add_(r_big, big, weight) is r_big
    torch.testing.assert_close(r_big, F.linear(big, weight), rtol=1e-6, atol=1e-6)   # 17 rows: the eager path
    assert launcher.num_calls == 1
    fresh_dispatcher.setenv(small_m_linear.ENABLE_ENV, "0")                 # off: the eager path
    linear_add_(torch.zeros(1, 6), torch.randn(1, 8), weight)
    assert launcher.num_calls == 1


def test_linear_add_under_autograd_takes_the_eager_path(fresh_dispatcher):
    launcher = _stand_in_add(fresh_dispatcher)
    weight = torch.randn(6, 8, requires_grad=True)
    x, start = torch.randn(1, 8), torch.randn(1, 6, requires_grad=True)
    residual = start * 1.0              # a non-leaf: in place is allowed, and differentiable
    linear_add_(residual, x, weight).sum().backward()
    assert weight.grad is not None and torch.equal(start.grad, torch.ones(1, 6))
    with torch.no_grad():
        assert torch.equal(linear_add_(torch.zeros(1, 6), x, weight), F.linear(x, weight) + 1)
    assert launcher.num_calls == 1      # only the no_grad call took the op


def test_a_failing_linear_add_launch_falls_back_and_leaves_the_other_ops_on(fresh_dispatcher):
    plain = _stand_in(fresh_dispatcher)
    fresh_route(fresh_dispatcher, small_m_linear, "_add_route")
    failing = use_launcher(fresh_dispatcher, small_m_linear, CountingLauncher(None, error=RuntimeError("no ptxas")),
                           "_add_route")
    gen = torch.Generator().manual_seed(12)
    x, weight, bias = torch.randn(1, 8, generator=gen), torch.randn(6, 8, generator=gen), torch.randn(6, generator=gen)
    for with_bias in (False, True, False):
        residual = torch.randn(1, 6, generator=gen)
        want = residual + F.linear(x, weight, bias if with_bias else None)
        assert linear_add_(residual, x, weight, bias if with_bias else None) is residual   # the eager path answered
        torch.testing.assert_close(residual, want, rtol=1e-6, atol=1e-6)
    assert failing.num_calls == 1                                   # remembered: not tried again
    assert "no ptxas" in small_m_linear.add_triton_failure()
    assert small_m_linear.triton_failure() is None and small_m_linear.glu_triton_failure() is None
    assert torch.equal(linear(x, weight), F.linear(x, weight) + 1) and plain.num_calls == 1
    small_m_linear.reset_add_triton_failure()
    linear_add_(torch.zeros(1, 6), x, weight)
    assert failing.num_calls == 2


def test_linear_add_argument_errors():
    r, x, w, b = torch.zeros(2, 6), torch.randn(2, 8), torch.randn(6, 8), torch.randn(6)
    bad = {
        "x rows": (r, torch.randn(3, 8), w, None),
        "leading dims": (torch.zeros(1, 2, 6), torch.randn(2, 1, 8), w, None),
        "x dims": (r, torch.randn(2, 1, 8), w, None),
        "weight K": (r, x, torch.randn(6, 7), None),
        "weight N": (r, x, torch.randn(5, 8), None),
        "weight dims": (r, x, torch.randn(6, 8, 1), None),
        "bias shape": (r, x, w, torch.randn(5)),
        "residual dtype": (r.double(), x, w, None),
        "x dtype": (r, x.half(), w, None),
        "weight dtype": (r, x, w.bfloat16(), b),
        "bias dtype": (r, x, w, b.double()),
        "device": (r, x, w.to("meta"), None),
        "non-contiguous residual": (torch.zeros(6, 2).t(), x, w, None),
        "scalar residual": (torch.zeros(()), x, w, None),
    }
    for name, args in bad.items():
        with pytest.raises(ValueError):
            linear_add_(*args)
            pytest.fail(name)
    h = torch.zeros(2, 8)                         # x overlapping residual: a read-write race
    with pytest.raises(ValueError, match="overlaps"):
        linear_add_(h, h, torch.randn(8, 8))
    with pytest.raises(ValueError, match="overlaps"):
        linear_add_(h.view(-1)[10:16].view(1, 6), h[1:], w)   # inside x's row
    packed = torch.zeros(14)                      # one storage, disjoint pieces: fine
    linear_add_(packed[:6].view(1, 6), packed[6:].view(1, 8), w)


def test_glu_norm_eps_off_is_linear_then_silu_mul_with_the_norm(fresh_dispatcher):
    """CPU, not asked for: silu_mul(F.linear(x, W), norm_source=x, eps) -- the formula."""
    case = _make_norm("norm-bf16-m2-k1024-eps", 0)
    x, weight, eps = case["x"], case["weight"], case["eps"]
    with OpCounter() as counter:
        got = linear_silu_mul(x, weight, norm_eps=eps)
    assert "qwen3tts.small_m_linear_silu_mul" not in counter.counts
    assert torch.equal(got, _norm_silu_mul(F.linear(x, weight), x, eps))
    assert not torch.equal(got, linear_silu_mul(x, weight))   # the norm did something
    with pytest.raises(ValueError, match="bias"):
        linear_silu_mul(x, weight, torch.zeros(weight.shape[0], dtype=x.dtype), norm_eps=eps)


def test_glu_norm_eps_reaches_the_launcher_and_falls_back_with_the_norm(fresh_dispatcher):
    """Asked for: the op hands norm_eps to the GLU launcher (and only when given: a launcher of
    (x, w, b) still serves the plain call); a failing launch falls back to the formula."""
    fresh_route(fresh_dispatcher, small_m_linear, "_glu_route")
    fresh_dispatcher.setenv(small_m_linear.ENABLE_ENV, "1")
    seen = []
    launcher = use_launcher(fresh_dispatcher, small_m_linear,
                            CountingLauncher(lambda *args: seen.append(args[3:]) or silu_mul(F.linear(*args[:3]))),
                            "_glu_route")
    case = _make_norm("norm-bf16-m1-k1024", 0)
    x, weight, eps = case["x"], case["weight"], case["eps"]
    linear_silu_mul(x, weight, norm_eps=eps)
    linear_silu_mul(x, weight)
    assert seen == [(eps,), ()] and launcher.num_calls == 2
    with pytest.raises(ValueError, match="bias"):
        linear_silu_mul(x, weight, torch.zeros(weight.shape[0], dtype=x.dtype), norm_eps=eps)
    assert launcher.num_calls == 2
    launcher.error = RuntimeError("no ptxas")
    assert torch.equal(linear_silu_mul(x, weight, norm_eps=eps), _norm_silu_mul(F.linear(x, weight), x, eps))
    assert "no ptxas" in small_m_linear.glu_triton_failure() and small_m_linear.add_triton_failure() is None


def test_model_layers_route_their_projections_through_linear(fresh_dispatcher):
    """With the kernel asked for, a decoder layer's four projections (fused qkv, o, fused gate/up,
    down) go through the ops at batch 1 (gate/up through the GLU one); off, none do."""
    from talker_service.model.config import DecoderStackConfig
    from talker_service.model.layers import DecoderLayer

    launcher = _stand_in(fresh_dispatcher)
    launcher.result = lambda x, w, b: F.linear(x, w, b)
    fresh_route(fresh_dispatcher, small_m_linear, "_glu_route")
    glu = use_launcher(fresh_dispatcher, small_m_linear, CountingLauncher(lambda x, w, b: silu_mul(F.linear(x, w, b))),
                       "_glu_route")
    config = DecoderStackConfig(hidden_size=32, intermediate_size=48, num_hidden_layers=1, num_attention_heads=4,
                                num_key_value_heads=2, head_dim=8, vocab_size=16, num_code_groups=4,
                                rms_norm_eps=1e-6, rope_theta=10000.0, attention_bias=False)
    layer = DecoderLayer(config, 0).eval()
    layer.self_attn.fuse_projections()
    layer.mlp.fuse_projections()

    class _KV:
        def update(self, layer_idx, k, v):
            return k, v

    cos, sin = torch.ones(1, 1, 8), torch.zeros(1, 1, 8)
    with torch.no_grad():
        on = layer(torch.randn(1, 1, 32), cos, sin, _KV(), None)
        assert (launcher.num_calls, glu.num_calls) == (3, 1)    # qkv, o, down; gate/up with its SwiGLU
        fresh_dispatcher.delenv(small_m_linear.ENABLE_ENV)
        off = layer(torch.randn(1, 1, 32), cos, sin, _KV(), None)
    assert (launcher.num_calls, glu.num_calls) == (3, 1) and on.shape == off.shape == (1, 1, 32)


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
