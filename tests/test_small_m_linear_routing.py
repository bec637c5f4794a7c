"""The few-row linear's dispatcher, in-process with stand-in launchers (no interpreter child): `linear`
is off by default on CPU, its row limit follows QWEN3_TTS_LINEAR_TRITON per setting, "0" turns it
off, gradients, other dtypes and empty inputs fall back to F.linear, and CPU tensors never load
Triton without the CPU variable; `linear_silu_mul` (GLU, with and without norm_eps) and `linear_add_`
(RESIDUAL: the eager path in place, its op up to the row limit, eager under autograd) take their
ops only when asked, remember a failing launch per op and reject bad arguments; a decoder layer's
projections go through the ops when asked. The kernel itself is tested in tests/test_small_m_linear.py;
the inputs both use are in tests/small_m_linear_cases.py.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

# triton_support first: it puts the repo root on sys.path for the kernels imports below
from triton_support import CountingLauncher, OpCounter, fresh_route, use_launcher
from kernels import small_m_linear
from kernels.silu_mul import silu_mul
from kernels.small_m_linear import linear, linear_add_, linear_silu_mul
from small_m_linear_cases import _make, _make_glu, _make_norm, _norm_silu_mul


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
