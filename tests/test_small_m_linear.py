"""The few-row linear: Triton kernel (CPU interpreter) vs F.linear, the `linear` dispatcher's routing
(opt-in, row limit, compile/grad/CPU fallbacks), and an sm_90 compile of the GPU variant.

Kernel launches happen in one child process started with TRITON_INTERPRET=1 and
QWEN3_TTS_LINEAR_CPU_TRITON=1 (`python tests/test_small_m_linear.py --child DIR`); comparisons happen
here. Tolerances: fp32 against fp64 F.linear, 1e-5 relative to the row's sum of |x||w| (the order of
summation differs); bf16/fp16 against fp64 F.linear of the same inputs, half an ulp of the output
plus that fp32 term (the kernel sums in fp32 and rounds once).
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
from kernels.small_m_linear import linear, linear_silu_mul

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


def _cases():
    cases = {name: _make(name, seed) for seed, name in enumerate(CASES)}
    return cases | {name: _make_glu(name, seed) for seed, name in enumerate(GLU_CASES)}


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


@pytest.mark.parametrize("dtype, m, n, k, glu", [("bf16", 1, 1024, 1024, False), ("bf16", 1, 12288, 2048, False),
                                              ("bf16", 8, 4096, 2048, False), ("fp32", 1, 2048, 6144, False),
                                              ("bf16", 1, 6144, 2048, True), ("bf16", 1, 3072, 1024, True)])
def test_kernel_compiles_for_hopper_with_wide_loads(dtype, m, n, k, glu, monkeypatch):
    """sm_90 compiles of the blocks choose_blocks picks for the models' shapes: the weight stream in
    128-bit loads (8 bf16 / 4 fp32 a thread), never element by element; with a bias too. GLU (the
    talker's and the predictor's gate/up at one row, n = I): the same loads for both halves, and
    silu's correctly rounded divide."""
    from kernels import small_m_linear_triton as smt

    skip_if_interpreting(smt)
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "1")
    block_m, block_n, block_k, num_warps = smt.choose_blocks(m, n, k, tiles=2 if glu else 1)
    signature = {"x_ptr": f"*{dtype}", "w_ptr": f"*{dtype}", "b_ptr": f"*{dtype}", "y_ptr": f"*{dtype}",
                 "M": "i32", "N": "i32", "K": "i32", "stride_xm": "i32", "stride_wn": "i32", "stride_ym": "i32"}
    names = list(signature) + ["BLOCK_M", "BLOCK_N", "BLOCK_K", "HAS_BIAS"]
    # pointers, strides, N and K 16-divisible, as the JIT specializes the models' shapes at run time
    divisible = [i for i, name in enumerate(names)
                 if name.endswith("_ptr") or name.startswith("stride") or name in ("N", "K")]
    for has_bias in (False, True):
        constants = {"BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k, "HAS_BIAS": has_bias, "GLU": glu,
                     "EXP64": False}
        kernel = compile_for_hopper(smt._small_m_linear_kernel, {**signature, **dict.fromkeys(constants, "constexpr")},
                                    constants, divisible, num_warps=num_warps)
        if not has_bias:
            ptx = kernel.asm["ptx"]
            assert "ld.global.v4" in ptx
            assert not re.search(r"ld\.global(\.nc)?\.(b16|u16|b32|u32|f32)\s", ptx), "scalar loads"
            if glu:
                assert "div.rn.f32" in ptx   # silu's correctly rounded divide, as in silu_mul


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
    from kernels.small_m_linear_triton import is_interpreting, small_m_linear_silu_mul_triton, small_m_linear_triton

    cases = torch.load(work_dir / "cases.pt")
    outputs = {}
    os.environ[small_m_linear.ENABLE_ENV] = "1"
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
    info = json.loads(info_path.read_text()) | {"glu_op_counts": dict(glu_counter.counts)}
    info_path.write_text(json.dumps(info))


if __name__ == "__main__":
    child_main(_run_child)
