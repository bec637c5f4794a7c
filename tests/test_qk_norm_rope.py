"""Fused QK-norm + RoPE: reference vs the model's code path, Triton kernel (CPU interpreter) vs the
reference, dispatcher routing and fallbacks, one op under a dispatch-mode counter. The cache-writing
variant (qk_norm_rope_write_kv) and the model's KV stores on it: tests/test_qk_norm_rope_write_kv.py.

triton.jit picks the interpreter when the kernel module is imported, so every kernel launch happens in
ONE child process started with TRITON_INTERPRET=1 (`python tests/test_qk_norm_rope.py --child DIR`).
The child rebuilds the same seeded inputs, runs only the kernel and the dispatcher and saves their
outputs; every comparison happens here in the parent.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

# triton_support first: it puts the repo root on sys.path for the kernels imports below
from triton_support import (CountingLauncher, OpCounter, assert_dispatch_equals_kernel,
                            check_failure_logged_once_and_remembered, check_import_failure_is_recorded,
                            check_real_launch_failure_falls_back, child_main, compile_for_hopper, forbid_triton,
                            fresh_route, run_interpreter_child, save_child_results, skip_if_interpreting,
                            use_launcher)
import kernels.qk_norm_rope as qkr
from kernels.qk_norm_rope_reference import apply_rope, qk_norm_rope_reference
from talker_service.model.layers import RMSNorm
from qk_norm_rope_cases import DTYPES, EPS, _make_case, ulp_distance

# (B, L, H, KV, D): talker decode, predictor prefill, a small odd one (the brief's shapes).
SPEC_SHAPES = {"decode": (1, 1, 16, 8, 128), "prefill": (3, 2, 16, 8, 128), "small": (2, 5, 4, 2, 64)}
# Every other supported head_dim, on a tiny grid.
HEAD_DIM_SHAPES = {f"d{d}": (1, 2, 2, 1, d) for d in (16, 32, 256)}
# 32 rows x 24 heads: enough programs to see the rare reduction-order ulp (kept small: interpreter).
MEDIUM_SHAPE = (4, 8, 16, 8, 128)
# (case, block_h) forced through the launcher: one head per program, tiles that straddle the end of
# the k heads (KV=2 < 4, KV=8 < 16) and a tile wider than every head count.
FORCED = [(f"{name}-exactvar", block_h) for name, block_h in (
    ("bf16-small", 1), ("bf16-small", 2), ("bf16-small", 4), ("fp32-small", 1), ("fp32-small", 8),
    ("bf16-decode", 1), ("bf16-decode", 16), ("bf16-decode", 32), ("fp16-prefill", 2))]



def _all_cases():
    cases = {}
    for kind in ("exactvar", "randn"):
        for shape_name, shape in {**SPEC_SHAPES, **HEAD_DIM_SHAPES}.items():
            for dname, dtype in DTYPES.items():
                if shape_name.startswith("d") and (dname == "fp16" or kind == "randn"):
                    continue
                cases[f"{dname}-{shape_name}-{kind}"] = _make_case(
                    shape, dtype, seed=len(cases), exact_var=kind == "exactvar",
                    decode_positions=shape_name != "prefill")
    cases["bf16-batch_step-exactvar"] = _make_case((2, 3, 4, 2, 64), torch.bfloat16, seed=50, exact_var=True,
                                                   batch_step=2, decode_positions=False)
    cases["fp32-d_strided-exactvar"] = _make_case((2, 2, 4, 2, 32), torch.float32, seed=51, exact_var=True,
                                                  d_contiguous=False)
    for i, dname in enumerate(("fp32", "bf16")):   # 32 rows: enough (row, j) with cos < 0 < sin
        cases[f"{dname}-zeropairs-exactvar"] = _make_case(MEDIUM_SHAPE, DTYPES[dname], seed=70 + i, exact_var=True,
                                                          zero_pairs=True)
    for i, dname in enumerate(("fp32", "bf16", "fp16")):
        cases[f"{dname}-medium-randn"] = _make_case(MEDIUM_SHAPE, DTYPES[dname], seed=60 + i, decode_positions=False)
    return cases


def _model_path(q, k, q_weight, k_weight, cos, sin):
    """Attention.forward between the projections and the KV store, with the model's own modules."""
    head_dim = q.shape[-1]
    q_norm, k_norm = RMSNorm(head_dim, EPS), RMSNorm(head_dim, EPS)
    with torch.no_grad():
        q_norm.weight = torch.nn.Parameter(q_weight.clone(), requires_grad=False)
        k_norm.weight = torch.nn.Parameter(k_weight.clone(), requires_grad=False)
        q_out = apply_rope(q_norm(q).transpose(1, 2), cos, sin)
        k_out = apply_rope(k_norm(k).transpose(1, 2), cos, sin)
    return q_out, k_out


# ---------------------------------------------------------------------------------------------
# Reference vs the model's code path (pure eager)


@pytest.mark.parametrize("dname", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("shape", list(SPEC_SHAPES.values()), ids=list(SPEC_SHAPES))
def test_reference_equals_model_code(dname, shape):
    args = _make_case(shape, DTYPES[dname], seed=7)
    for got, want in zip(qk_norm_rope_reference(*args, EPS), _model_path(*args)):
        assert got.dtype == want.dtype and got.shape == want.shape
        assert torch.equal(got, want)


def test_reference_bf16_rounds_like_the_model_not_like_fp32():
    """The bf16 check is meaningful: computing in fp32 and rounding once gives other bits."""
    args = _make_case(SPEC_SHAPES["prefill"], torch.bfloat16, seed=8)
    q_ref, _ = qk_norm_rope_reference(*args, EPS)
    q32, _ = qk_norm_rope_reference(*(t.float() for t in args), EPS)
    assert not torch.equal(q_ref, q32.to(torch.bfloat16))


# ---------------------------------------------------------------------------------------------
# Kernel under the Triton interpreter (child process)


@pytest.fixture(scope="module")
def interpreted(tmp_path_factory):
    work_dir = tmp_path_factory.mktemp("qkrope_interp")
    info = run_interpreter_child(__file__, work_dir, qkr.CPU_TRITON_ENV, timeout=300)
    assert info["is_interpreting"], "the child must run the Triton interpreter, not a GPU kernel"
    return _all_cases(), torch.load(work_dir / "outputs.pt"), info


def _ulps_vs_reference(outs, args, name):
    """Elementwise ulp distance of (q_out, k_out) from the reference, after shape/dtype/layout checks."""
    refs = qk_norm_rope_reference(*args, EPS)
    ulps = []
    for got, ref in zip(outs, refs):
        assert got.shape == ref.shape and got.dtype == ref.dtype and got.is_contiguous(), name
        ulps.append(ulp_distance(got, ref).flatten())
    return torch.cat(ulps), refs


_EXACTVAR_CASES = [n for n in _all_cases() if n.endswith("exactvar")]
_RANDN_CASES = [n for n in _all_cases() if n.endswith("randn")]


@pytest.mark.parametrize("name", _EXACTVAR_CASES)
def test_kernel_bit_identical_when_variance_is_order_free(interpreted, name):
    """With the sum of squares exact in any order, every other step must round exactly like eager:
    all dtypes (fp32 included) bit-identical, for every shape, stride pattern and head_dim."""
    cases, outputs, _ = interpreted
    ulps, _ = _ulps_vs_reference(outputs[f"kernel/{name}"], cases[name], name)
    assert int(ulps.max()) == 0, f"{name}: {int((ulps > 0).sum())} of {ulps.numel()} elements differ, max {int(ulps.max())} ulp"


@pytest.mark.parametrize("name", [n for n in _EXACTVAR_CASES if "zeropairs" in n])
def test_kernel_gives_zeros_their_eager_sign(interpreted, name):
    """0 * cos - 0 * sin is -0.0 in eager where cos < 0 < sin; the ulp check above cannot tell the
    zeros apart, so the sign bits are compared here (a negation lowered as 0 - x loses them)."""
    cases, outputs, _ = interpreted
    _, refs = _ulps_vs_reference(outputs[f"kernel/{name}"], cases[name], name)
    negative_zeros = sum(int(((ref == 0) & torch.signbit(ref)).sum()) for ref in refs)
    assert negative_zeros > 0, f"{name}: the case holds no -0.0 to check"
    for got, ref in zip(outputs[f"kernel/{name}"], refs):
        assert torch.equal(torch.signbit(got), torch.signbit(ref)), f"{name}: the sign of a zero differs"


@pytest.mark.parametrize("name", _RANDN_CASES)
def test_kernel_matches_reference_on_gaussian_inputs(interpreted, name):
    """Gaussian q/k: the kernel sums squares in another order than eager, which can move the fp32
    variance by one ulp. fp32: within 1e-6 on the brief's shapes (2 ulp at |out| in [4, 8)), plus
    2^-21 relative on the larger grid (seen: 1.4e-6 at |out| = 4.9). bf16/fp16: that ulp flips a
    rounding now and then; seen here: bf16 none, fp16 2 of 98k elements (1 ulp), and on an 8x16-row
    grid fp16 7 of 393k (<= 2 ulp), bf16 none. Bound: rare, and at most one ulp of a |term| <= 8."""
    cases, outputs, _ = interpreted
    outs = outputs[f"kernel/{name}"]
    ulps, refs = _ulps_vs_reference(outs, cases[name], name)
    if outs[0].dtype == torch.float32:
        rtol = 0 if name.split("-")[1] in SPEC_SHAPES else 2.0 ** -21
        for got, ref in zip(outs, refs):
            torch.testing.assert_close(got, ref, atol=1e-6, rtol=rtol, msg=lambda m: f"{name}: {m}")
        return
    flips = int((ulps > 0).sum())
    max_abs = max(float((got.float() - ref.float()).abs().max()) for got, ref in zip(outs, refs))
    assert flips <= 1e-3 * ulps.numel() and max_abs <= 8 * torch.finfo(outs[0].dtype).eps, (
        f"{name}: {flips} of {ulps.numel()} elements differ, max {int(ulps.max())} ulp, max abs {max_abs:.3g}")


@pytest.mark.parametrize("name, block_h", FORCED, ids=[f"{n}-bh{b}" for n, b in FORCED])
def test_every_head_tiling_is_exact(interpreted, name, block_h):
    cases, outputs, _ = interpreted
    outs = outputs[f"forced/{name}/bh{block_h}"]
    ulps, _ = _ulps_vs_reference(outs, cases[name], name)
    assert int(ulps.max()) == 0, f"{name} block_h={block_h}: {int((ulps > 0).sum())} elements differ"
    assert all(torch.equal(a, b) for a, b in zip(outs, outputs[f"kernel/{name}"])), "tiling changed the result"


def test_inputs_are_strided_views(interpreted):
    """The cases really exercise the strided paths the model produces."""
    cases, _, _ = interpreted
    q, k, _, _, cos, _ = cases["bf16-prefill-exactvar"]
    width = (16 + 2 * 8) * 128
    assert q.stride() == (2 * width, width, 128, 1) and k.stride() == (2 * width, width, 128, 1)
    assert k.data_ptr() - q.data_ptr() == 16 * 128 * q.element_size()
    assert cos.stride(0) == 0
    q, _, _, _, _, _ = cases["bf16-batch_step-exactvar"]
    assert q.stride(0) == 2 * q.shape[1] * q.stride(1)
    assert cases["fp32-d_strided-exactvar"][0].stride(-1) == 2


@pytest.mark.parametrize("name", [n for n in _all_cases() if n.split("-")[1] in SPEC_SHAPES])
def test_dispatcher_uses_triton_when_forced(interpreted, name):
    cases, outputs, info = interpreted
    assert_dispatch_equals_kernel(info, outputs, name)


# ---------------------------------------------------------------------------------------------
# Dispatcher routing and fallbacks (in-process, no kernel runs)


@pytest.fixture
def fresh_dispatcher(monkeypatch):
    return fresh_route(monkeypatch, qkr)


def _stand_in():
    def result(*args):
        q_out, k_out = qk_norm_rope_reference(*args)
        return (q_out + 1).contiguous(), (k_out + 1).contiguous()  # distinguishable from eager
    return CountingLauncher(result)


def _small_args(dtype=torch.float32, seed=1):
    return _make_case((2, 3, 4, 2, 32), dtype, seed=seed)


def _assert_is_reference(outs, args, plus=0):
    for got, ref in zip(outs, qk_norm_rope_reference(*args, EPS)):
        assert got.is_contiguous() and torch.equal(got, ref + plus)


def test_cpu_uses_eager_without_touching_triton(fresh_dispatcher):
    forbid_triton(fresh_dispatcher, qkr)
    args = _small_args(torch.bfloat16)
    _assert_is_reference(qkr.qk_norm_rope(*args, EPS), args)


def test_forced_cpu_path_calls_launcher_and_routes_unsupported_inputs(fresh_dispatcher):
    launcher = use_launcher(fresh_dispatcher, qkr, _stand_in())
    args = _small_args()
    _assert_is_reference(qkr.qk_norm_rope(*args, EPS), args, plus=1)
    assert launcher.num_calls == 1
    q, k, qw, kw, cos, sin = args
    unsupported = {
        "fp64": tuple(t.double() for t in args),
        "fp32 weights, bf16 activations": (q.bfloat16(), k.bfloat16(), qw, kw, cos.bfloat16(), sin.bfloat16()),
        "head_dim 24": _make_case((1, 2, 2, 1, 24), torch.float32, seed=3),
        "head_dim 512": _make_case((1, 1, 1, 1, 512), torch.float32, seed=4),
        "empty": _make_case((0, 2, 2, 1, 32), torch.float32, seed=5),
    }
    for what, uargs in unsupported.items():
        outs = qkr.qk_norm_rope(*uargs, EPS)
        refs = qk_norm_rope_reference(*uargs, EPS)
        assert all(o.dtype == r.dtype and torch.equal(o, r) for o, r in zip(outs, refs)), what
    assert launcher.num_calls == 1, "unsupported inputs must not reach the launcher"
    assert qkr.triton_failure() is None


def test_grad_path_uses_eager_and_backprops(fresh_dispatcher):
    launcher = use_launcher(fresh_dispatcher, qkr, _stand_in())
    q, k, qw, kw, cos, sin = _small_args(seed=2)
    qw = qw.clone().requires_grad_(True)
    q_out, k_out = qkr.qk_norm_rope(q, k, qw, kw, cos, sin, EPS)
    assert launcher.num_calls == 0 and q_out.requires_grad and not k_out.requires_grad
    q_out.sum().backward()
    assert qw.grad is not None and torch.isfinite(qw.grad).all()
    with torch.no_grad():
        qkr.qk_norm_rope(q, k, qw, kw, cos, sin, EPS)
    assert launcher.num_calls == 1, "without grad mode the kernel must be used"


def test_failure_is_logged_once_and_never_retried(fresh_dispatcher, caplog):
    args = _small_args(torch.bfloat16, seed=3)
    check_failure_logged_once_and_remembered(fresh_dispatcher, caplog, qkr, lambda: qkr.qk_norm_rope(*args, EPS),
                                             lambda outs: _assert_is_reference(outs, args))


def test_import_failure_is_recorded(fresh_dispatcher, caplog):
    args = _small_args(seed=4)
    check_import_failure_is_recorded(fresh_dispatcher, caplog, qkr, lambda: qkr.qk_norm_rope(*args, EPS),
                                     lambda outs: _assert_is_reference(outs, args))


def test_real_launch_failure_falls_back(fresh_dispatcher):
    from kernels import qk_norm_rope_triton

    args = _small_args(torch.bfloat16, seed=5)
    check_real_launch_failure_falls_back(fresh_dispatcher, qkr, qk_norm_rope_triton, lambda: qkr.qk_norm_rope(*args, EPS),
                                         lambda outs: _assert_is_reference(outs, args))


@pytest.mark.parametrize("bad, match", [
    (lambda q, k, qw, kw, c, s: (q[0], k, qw, kw, c, s), r"q \[B, L, H, D\]"),
    (lambda q, k, qw, kw, c, s: (q, k[:, :1], qw, kw, c, s), r"does not match q"),
    (lambda q, k, qw, kw, c, s: (q, k, qw[:-1], kw, c, s), r"q_weight must have shape \[32\]"),
    (lambda q, k, qw, kw, c, s: (q, k, qw, kw, c[:1], s), r"cos must have shape \[2, 3, 32\]"),
])
def test_bad_arguments_raise_value_error(fresh_dispatcher, bad, match):
    args = _small_args(seed=6)
    with pytest.raises(ValueError, match=match):
        qkr.qk_norm_rope(*bad(*args), EPS)
    assert qkr.triton_failure() is None, "bad input must not disable the kernel"


def test_custom_op_is_one_op_under_dispatch_mode(fresh_dispatcher):
    args = _small_args(torch.bfloat16, seed=7)
    with torch.no_grad(), OpCounter() as counter:
        outs = qkr.qk_norm_rope(*args, EPS)
    assert counter.ops == ["qwen3tts.qk_norm_rope.default"]
    _assert_is_reference(outs, args)
    with torch.no_grad(), OpCounter() as eager:
        qk_norm_rope_reference(*args, EPS)
    assert len(eager.ops) >= 20, eager.ops  # what the op replaces


def test_fake_matches_real():
    args = _small_args(torch.bfloat16, seed=8)
    torch.library.opcheck(qkr.qk_norm_rope_op, (*args, EPS), test_utils=("test_schema", "test_faketensor"))
    q, k, qw, kw, cos, sin = _small_args(torch.bfloat16, seed=8)
    mixed = (q, k, qw.float(), kw.float(), cos, sin)  # promotes to fp32, like the reference
    torch.library.opcheck(qkr.qk_norm_rope_op, (*mixed, EPS), test_utils=("test_schema", "test_faketensor"))


def test_attention_with_fused_projection_matches_kernel_inputs():
    """A projection output split the way Attention._project splits it gives the views the op takes."""
    batch, seq_len, num_heads, num_kv, head_dim, hidden = 2, 3, 4, 2, 32, 64
    gen = torch.Generator().manual_seed(9)
    x = torch.randn(batch, seq_len, hidden, generator=gen)
    weight = torch.randn((num_heads + 2 * num_kv) * head_dim, hidden, generator=gen)
    q, k, _ = F.linear(x, weight).split((num_heads * head_dim, num_kv * head_dim, num_kv * head_dim), dim=-1)
    q = q.view(batch, seq_len, num_heads, head_dim)
    k = k.view(batch, seq_len, num_kv, head_dim)
    _, _, qw, kw, cos, sin = _make_case((batch, seq_len, num_heads, num_kv, head_dim), torch.float32, seed=9)
    for got, want in zip(qkr.qk_norm_rope(q, k, qw, kw, cos, sin, EPS), _model_path(q, k, qw, kw, cos, sin)):
        assert torch.equal(got, want)


# ---------------------------------------------------------------------------------------------
# Ahead-of-time compile for Hopper (no GPU needed)


def test_kernel_compiles_for_hopper_without_fma():
    """sm_90 cubin with the launcher's options: both q/k branches compile, 1/sqrt is the MUFU rsqrt
    (what torch.rsqrt's rsqrtf uses on CUDA) and no product is contracted into an FMA."""
    from kernels import qk_norm_rope_triton as qkt

    skip_if_interpreting(qkt)
    import inspect

    names = list(inspect.signature(qkt._qk_norm_rope_kernel.fn).parameters)
    constexprs = {"BLOCK_H": 2, "HALF": 64, "ROUND": 1}
    signature = {n: "constexpr" if n in constexprs else "*bf16" if n.endswith("_ptr") else
                 "fp32" if n == "eps" else "i32" for n in names}
    divisible = [i for i, n in enumerate(names) if n.endswith("_ptr") or "stride" in n]
    kernel = compile_for_hopper(qkt._qk_norm_rope_kernel, signature, constexprs, divisible,
                                num_warps=1, **qkt.LAUNCH_OPTIONS)
    ptx = kernel.asm["ptx"]
    assert "rsqrt.approx" in ptx
    assert not re.search(r"\bfma\.rn\.f32", ptx), "FMA contraction changes the eager rounding"


def test_choose_block_h():
    from kernels.qk_norm_rope_triton import choose_block_h

    assert choose_block_h(1, 16, 8, num_sms=132) == 1  # talker decode: spread the 24 heads
    assert choose_block_h(64, 16, 8, num_sms=132) == 2
    assert choose_block_h(4096, 16, 8, num_sms=132) == 8  # long prefill: capped
    assert choose_block_h(4096, 2, 1, num_sms=132) == 2  # never wider than the head count needs
    # the cache-writing variant's V tiles are programs too: at block_h 2, 40 rows x 16 tiles >= 4 per SM
    assert choose_block_h(40, 16, 8, num_sms=132) == 1
    assert choose_block_h(40, 16, 8, num_sms=132, num_v_heads=8) == 2


# ---------------------------------------------------------------------------------------------
# Child process body


def _run_child(work_dir: Path) -> None:
    from kernels.qk_norm_rope_triton import is_interpreting, qk_norm_rope_triton

    cases = _all_cases()
    outputs = {}
    for name, args in cases.items():
        outputs[f"kernel/{name}"] = qk_norm_rope_triton(*args, EPS)
        if name.split("-")[1] in SPEC_SHAPES:
            outputs[f"dispatch/{name}"] = qkr.qk_norm_rope(*args, EPS)
    for name, block_h in FORCED:
        outputs[f"forced/{name}/bh{block_h}"] = qk_norm_rope_triton(*cases[name], EPS, block_h=block_h)
    save_child_results(work_dir, outputs, qkr, is_interpreting())


if __name__ == "__main__":
    child_main(_run_child)
