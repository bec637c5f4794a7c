"""silu_mul: Triton kernel (CPU interpreter) vs the eager reference, the qwen3tts::silu_mul op, routing.

triton.jit picks the interpreter when the kernel module is imported, so every real kernel launch
happens in one child process started with TRITON_INTERPRET=1 and QWEN3_TTS_SILUMUL_CPU_TRITON=1
(`python tests/test_silu_mul.py --child DIR`): the parent writes the inputs, the child only runs the
kernel and the dispatcher, and every comparison happens here in the parent. The dispatcher's
fallbacks and the op registration are tested in-process with stand-in launchers.

silu depends on the gate value alone, so the "exhaustive" cases feed all 2^16 bf16 (and fp16) bit
patterns as gates: with up = 1 they check the rounded silu for every possible input, with a random
up the rounding of the product as well.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

# triton_support first: it puts the repo root on sys.path for the kernels imports below
from triton_support import (CountingLauncher, OpCounter, assert_dispatcher_took_triton,
                            check_failure_logged_once_and_remembered, check_import_failure_is_recorded,
                            check_real_launch_failure_falls_back, child_main, compile_for_hopper, equal_to,
                            forbid_triton, fresh_route, run_interpreter_child, save_child_results,
                            skip_if_interpreting, use_launcher)
from kernels import silu_mul
from kernels.silu_mul_reference import silu_mul_reference

OP_NAME = "qwen3tts.silu_mul"
INT_VIEW = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32}
# Real sizes: talker decode (I = 6144) for one row and for batch 4 x length 2, code predictor
# (I = 3072), a masked tail (I = 1000) and I = 1.
SHAPES = {
    "bf16-1x1x12288": ((1, 1, 12288), torch.bfloat16),
    "bf16-4x2x6144": ((4, 2, 6144), torch.bfloat16),
    "fp32-3x12288": ((3, 12288), torch.float32),
    "fp32-4x2x6144": ((4, 2, 6144), torch.float32),
    "fp16-2x6144": ((2, 6144), torch.float16),
    "bf16-3x2000": ((3, 2000), torch.bfloat16),
    "fp32-3x2000": ((3, 2000), torch.float32),
    "bf16-2x2": ((2, 2), torch.bfloat16),
}
# (case, (BLOCK, num_warps)) forced through the launcher: a partial last tile, a tile wider than I,
# many narrow tiles.
FORCED_BLOCKS = [
    ("bf16-3x2000", (256, 1)),
    ("fp32-3x2000", (256, 1)),
    ("bf16-4x2x6144", (4096, 4)),
    ("fp32-4x2x6144", (128, 1)),
]


def _make(shape, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=gen) * 3.0).to(dtype)


def _all_gates(dtype):
    """Every 16-bit pattern (incl. +-0, subnormals, +-inf, NaNs) as a [64, 1024] tensor of `dtype`."""
    return torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(dtype).view(64, 1024)


def _all_cases():
    cases = {name: _make(shape, dtype, seed=i) for i, (name, (shape, dtype)) in enumerate(SHAPES.items())}
    for dname, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
        gate = _all_gates(dtype)
        cases[f"{dname}-exhaustive-up1"] = torch.cat([gate, torch.ones_like(gate)], dim=-1)
        cases[f"{dname}-exhaustive-rand"] = torch.cat([gate, _make(gate.shape, dtype, seed=40)], dim=-1)
    return cases


def _strided_inputs():
    """name -> a gate_up view that is not a plain contiguous tensor."""
    big = _make((4, 3, 2 * 1024 + 64), torch.bfloat16, seed=60)
    fused = _make((3, 2, 4 * 512), torch.bfloat16, seed=61)  # e.g. a wider fused GEMM output
    return {
        "row_slice": big[..., 32:32 + 2048],  # row stride 2112, storage offset 32: a view
        "chunk": fused.chunk(2, dim=-1)[1],  # the second half of a wider row: a view, offset 1024
        "every_other": big[:, ::2, :2048],  # rows not addressable with one stride: copied
        "col_step": big[..., ::2][..., :2048],  # column stride 2: copied
        "fp32_chunk": fused.float().chunk(2, dim=-1)[0],
    }


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(INT_VIEW[t.dtype])


def _ulp_distance(a: torch.Tensor, b: torch.Tensor) -> int:
    """Largest distance in representable values (same signs assumed, as here)."""
    iv = INT_VIEW[a.dtype]
    return int((a.view(iv).long() - b.view(iv).long()).abs().max())


def _assert_matches_reference(y, gate_up):
    ref = silu_mul_reference(gate_up)
    assert y.shape == ref.shape and y.dtype == ref.dtype and y.is_contiguous()
    nan = torch.isnan(ref)
    assert torch.equal(torch.isnan(y), nan), "NaNs in different places"
    y, ref = y[~nan], ref[~nan]
    if ref.dtype == torch.float32:
        # CPU torch uses a vectorized (Sleef) expf, the kernel a correctly rounded one in the
        # interpreter (libdevice expf on the GPU): <= 4 fp32 ulp apart measured.
        torch.testing.assert_close(y, ref, atol=1e-7, rtol=1e-6)
    else:
        # bit-identical, -0.0 vs +0.0 included (compared as integers)
        iv = INT_VIEW[ref.dtype]
        bad = y.view(iv) != ref.view(iv)
        assert not bad.any(), (f"{int(bad.sum())} of {y.numel()} elements differ (max {_ulp_distance(y, ref)} "
                               f"ulp), e.g. gate values {gate_up.chunk(2, -1)[0][~nan][bad][:5].tolist()}")


# ---------------------------------------------------------------------------------------------
# Reference == the eager code it replaces


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_reference_is_the_swiglu_activation(dtype, monkeypatch):
    """What SwiGLU (with fused gate/up) feeds to down_proj is exactly silu_mul_reference(gate_up)."""
    from talker_service.model import layers
    from talker_service.model.layers import SwiGLU

    torch.manual_seed(0)
    mlp = SwiGLU(64, 96).to(dtype)
    mlp.fuse_projections()
    seen = []
    real_linear = layers.linear

    def recording_linear(x, weight, bias=None):   # the layers' projections go through kernels' linear
        if weight is mlp.down_proj.weight:
            seen.append(x)
        return real_linear(x, weight, bias)

    monkeypatch.setattr(layers, "linear", recording_linear)
    x = _make((3, 2, 64), dtype, seed=1)
    with torch.no_grad():
        mlp(x)
        gate_up = F.linear(x, torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]))  # the fused GEMM
        gate, up = gate_up.chunk(2, dim=-1)
        assert torch.equal(seen[0], silu_mul_reference(gate_up))
        assert torch.equal(silu_mul_reference(gate_up), F.silu(gate) * up)
        assert torch.equal(silu_mul.silu_mul(gate_up), seen[0])  # the CPU op: reference inside


def test_reference_bf16_rounds_twice():
    """The documented PyTorch rounding: silu in fp32 rounded to bf16, then the product rounded."""
    gate_up = torch.cat([_all_gates(torch.bfloat16), _make((64, 1024), torch.bfloat16, seed=2)], dim=-1)
    gate, up = gate_up.float().chunk(2, dim=-1)
    silu_bf16 = (gate / (1.0 + torch.exp(-gate))).to(torch.bfloat16)
    expected = (silu_bf16.float() * up).to(torch.bfloat16)
    got = silu_mul_reference(gate_up)
    ok = (got.view(torch.int16) == expected.view(torch.int16)) | (torch.isnan(got) & torch.isnan(expected))
    assert ok.all()


# ---------------------------------------------------------------------------------------------
# Kernel under the Triton interpreter (child process)


@pytest.fixture(scope="module")
def interpreted(tmp_path_factory):
    work_dir = tmp_path_factory.mktemp("silu_mul_interp")
    torch.save(_all_cases(), work_dir / "cases.pt")
    info = run_interpreter_child(__file__, work_dir, silu_mul.CPU_TRITON_ENV, timeout=120)
    return torch.load(work_dir / "cases.pt"), torch.load(work_dir / "outputs.pt"), info


@pytest.mark.parametrize("name", list(_all_cases()))
def test_kernel_matches_reference(interpreted, name):
    cases, outputs, info = interpreted
    assert info["is_interpreting"], "the child must run the Triton interpreter, not a GPU kernel"
    _assert_matches_reference(outputs[f"kernel/{name}"], cases[name])


@pytest.mark.parametrize("name", list(_all_cases()))
def test_dispatcher_uses_triton_when_forced(interpreted, name):
    cases, outputs, info = interpreted
    assert_dispatcher_took_triton(info)
    assert torch.equal(_bits(outputs[f"dispatch/{name}"]), _bits(outputs[f"kernel/{name}"]))


def _forced_key(name, block):
    return "forced/%s/b%dw%d" % ((name,) + tuple(block))


@pytest.mark.parametrize("name, block", FORCED_BLOCKS, ids=[f"{n}-b{b}w{w}" for n, (b, w) in FORCED_BLOCKS])
def test_every_block_shape_is_correct(interpreted, name, block):
    cases, outputs, _ = interpreted
    _assert_matches_reference(outputs[_forced_key(name, block)], cases[name])


@pytest.mark.parametrize("name", list(_strided_inputs()))
def test_strided_inputs(interpreted, name):
    _, outputs, _ = interpreted
    _assert_matches_reference(outputs[f"strided/{name}"], _strided_inputs()[name])


def test_leading_dims_collapse(interpreted):
    cases, outputs, _ = interpreted
    assert torch.equal(outputs["kernel/bf16-4x2x6144"].view(8, 3072), outputs["collapsed/8x6144"])


def test_op_is_one_dispatch_on_triton_path(interpreted):
    _, _, info = interpreted
    assert info["triton_path_op_counts"] == {OP_NAME: 1}


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


def test_make_fx_sees_one_node():
    from torch.fx.experimental.proxy_tensor import make_fx

    gate_up = _make((2, 2 * 256), torch.bfloat16, seed=8)
    gm = make_fx(silu_mul.silu_mul, tracing_mode="fake")(gate_up)
    calls = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert calls == [torch.ops.qwen3tts.silu_mul.default], calls


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_opcheck(dtype):
    gate_up = _make((3, 4, 2 * 128), dtype, seed=9)
    torch.library.opcheck(torch.ops.qwen3tts.silu_mul.default, (gate_up,))
    torch.library.opcheck(torch.ops.qwen3tts.silu_mul.default, (gate_up[..., 64:192],))  # strided view


# ---------------------------------------------------------------------------------------------
# Dispatcher routing and fallbacks (in-process, stand-in launchers)


@pytest.fixture
def fresh_dispatcher(monkeypatch):
    return fresh_route(monkeypatch, silu_mul)


def _stand_in():
    return CountingLauncher(lambda gate_up: silu_mul_reference(gate_up) + 1.0)  # distinguishable from eager


def test_cpu_default_uses_reference_without_touching_triton(fresh_dispatcher):
    forbid_triton(fresh_dispatcher, silu_mul)
    for dtype in (torch.float32, torch.bfloat16):
        gate_up = _make((3, 5, 256), dtype, seed=1)
        assert torch.equal(silu_mul.silu_mul(gate_up), silu_mul_reference(gate_up))


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


def test_failure_is_logged_once_and_remembered(fresh_dispatcher, caplog):
    gate_up = _make((3, 5, 256), torch.bfloat16, seed=3)
    check_failure_logged_once_and_remembered(fresh_dispatcher, caplog, silu_mul, lambda: silu_mul.silu_mul(gate_up),
                                             equal_to(silu_mul_reference(gate_up)))


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


def test_choose_block():
    from kernels.silu_mul_triton import choose_block

    assert choose_block(6144) == (1024, 4)  # talker: 6 tiles per row
    assert choose_block(3072) == (1024, 4)  # code predictor: 3 tiles per row
    assert choose_block(1000) == (1024, 4)
    assert choose_block(100) == (128, 1)
    assert choose_block(1) == (1, 1)


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_kernel_compiles_for_hopper(dtype):
    """Ahead-of-time compile to an sm_90 cubin (no GPU needed): the libdevice expf branch, the correctly
    rounded divide and 16-byte vector loads/stores when I and the row strides are multiples of 16."""
    from kernels import silu_mul_triton

    skip_if_interpreting(silu_mul_triton)
    signature = {"gu_ptr": f"*{dtype}", "out_ptr": f"*{dtype}", "inter": "i32", "gu_row_stride": "i32",
                 "out_row_stride": "i32", "BLOCK": "constexpr", "EXP64": "constexpr"}
    kernel = compile_for_hopper(silu_mul_triton._silu_mul_kernel, signature, {"BLOCK": 1024, "EXP64": False},
                                range(5), num_warps=4, **silu_mul_triton.LAUNCH_OPTIONS)
    ptx = kernel.asm["ptx"]
    assert "div.rn.f32" in ptx and "ex2.approx" in ptx  # __nv_expf is inlined (its core is ex2.approx)
    assert not re.search(r"^\s*call", ptx, re.M), "libdevice expf should be inlined"
    assert re.search(r"ld\.global[^\n]*\.v4", ptx) and re.search(r"st\.global[^\n]*\.v[24]", ptx)


# ---------------------------------------------------------------------------------------------
# Child process body


def _run_child(work_dir: Path) -> None:
    from kernels.silu_mul_triton import is_interpreting, silu_mul_triton

    cases = torch.load(work_dir / "cases.pt")
    outputs = {}
    for name, gate_up in cases.items():
        outputs[f"kernel/{name}"] = silu_mul_triton(gate_up)
        outputs[f"dispatch/{name}"] = silu_mul.silu_mul(gate_up)
    for name, block in FORCED_BLOCKS:
        outputs[_forced_key(name, block)] = silu_mul_triton(cases[name], block=block)
    for name, gate_up in _strided_inputs().items():
        outputs[f"strided/{name}"] = silu_mul_triton(gate_up)
    outputs["collapsed/8x6144"] = silu_mul_triton(cases["bf16-4x2x6144"].reshape(8, 6144))
    with torch.no_grad(), OpCounter() as counter:
        silu_mul.silu_mul(cases["bf16-4x2x6144"])
    save_child_results(work_dir, outputs, silu_mul, is_interpreting(), counter)


if __name__ == "__main__":
    child_main(_run_child)
