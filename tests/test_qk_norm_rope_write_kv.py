"""The cache-writing fused QK-norm + RoPE (qk_norm_rope_write_kv)'s kernel: reference writes, the
Triton kernel (CPU interpreter) vs the reference and vs the plain kernel, the dispatcher forced onto it,
and the model's KV stores on the Triton route against the eager route. Its deferred input norm
(norm_source: q, k and v scaled by each token's rsqrt(mean(h^2) + eps) first): the same checks, one on
the GPU, and the sm_90 compile of both variants. The op's routing, fallbacks and registration, in
process: tests/test_qk_norm_rope_write_kv_routing.py.

As in tests/test_qk_norm_rope.py, every kernel launch happens in ONE child process started with
TRITON_INTERPRET=1 (`python tests/test_qk_norm_rope_write_kv.py --child DIR`); the parent compares.
"""
from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest
import torch

# triton_support first: it puts the repo root on sys.path for the kernels imports below
from triton_support import (child_main, compile_for_hopper, counting, fresh_route, run_interpreter_child,
                            save_child_results, skip_if_interpreting)
import kernels.qk_norm_rope as qkr
from kernels.qk_norm_rope_reference import apply_norm_scale, qk_norm_rope_write_kv_reference
from kernels.rmsnorm_reference import inverse_rms
from kernels.rmsnorm_reference import rms_norm_reference
from talker_service.model.layers import rope_tables
from qk_norm_rope_cases import (CACHE_LAYERS, DTYPES, EPS, SENTINEL, TARGET_LAYER, WRITE_SHAPES, _assert_write_equal,
                                _expected_write, _make_case, _norm_reference, _run_write, _write_case, ulp_distance)


@pytest.fixture(scope="module")
def interpreted(tmp_path_factory):
    work_dir = tmp_path_factory.mktemp("qkrope_write_interp")
    info = run_interpreter_child(__file__, work_dir, qkr.CPU_TRITON_ENV, timeout=300)
    assert info["is_interpreting"], "the child must run the Triton interpreter, not a GPU kernel"
    return _write_cases(), torch.load(work_dir / "outputs.pt"), info


@pytest.fixture
def fresh_dispatcher(monkeypatch):
    return fresh_route(monkeypatch, qkr)


# ---------------------------------------------------------------------------------------------
# The cache-writing variant (qk_norm_rope_write_kv): kernel in the interpreter child

# The write cases and their shapes, the stacks and the expected writes: tests/qk_norm_rope_cases.py.
# rows 0 and 1 point outside the cache (slot S; position P), row 2 is in range: only row 2 is written
OUT_OF_RANGE = ("talker", [5, 0, 2], [0, 7, 3])
WRITE_FORCED = [("bf16-talker-exactvar", bh) for bh in (1, 2, 4, 16)] + [("fp32-predictor_l2-exactvar", 8)]


def _write_cases():
    cases = {}
    for kind in ("exactvar", "randn"):
        for shape_name in WRITE_SHAPES:
            for dname in ("fp32", "bf16"):
                cases[f"{dname}-{shape_name}-{kind}"] = _write_case(shape_name, DTYPES[dname], seed=100 + len(cases),
                                                                    exact_var=kind == "exactvar")
    shape_name, rows, positions = OUT_OF_RANGE
    cases["bf16-out_of_range-exactvar"] = _write_case(shape_name, torch.bfloat16, seed=130, exact_var=True,
                                                      rows=rows, positions=positions)
    return cases


_WRITE_EXACT = [n for n in _write_cases() if n.endswith("exactvar") and "out_of_range" not in n]


@pytest.mark.parametrize("name", _WRITE_EXACT)
def test_write_kv_reference_writes_exactly_the_destinations(name):
    """The reference's index writes put every token where it belongs and touch nothing else."""
    case = _write_cases()[name]
    _assert_write_equal(_run_write(qk_norm_rope_write_kv_reference, case), _expected_write(case), name)


@pytest.mark.parametrize("name", _WRITE_EXACT)
def test_write_kv_kernel_is_bit_identical_to_reference(interpreted, name):
    """q_out and every element of both cache stacks: the written positions equal the reference
    bit for bit, every other position (other rows, positions, layers) still holds the sentinel."""
    _, outputs, _ = interpreted
    case = _write_cases()[name]
    got = outputs[f"write_kernel/{name}"]
    assert got[0].is_contiguous()
    _assert_write_equal(got, _expected_write(case), name)
    _assert_write_equal(got, _run_write(qk_norm_rope_write_kv_reference, case), name)


@pytest.mark.parametrize("name", [n for n in _write_cases() if n.endswith("randn")])
def test_write_kv_kernel_computes_what_the_plain_kernel_computes(interpreted, name):
    """Gaussian inputs (where both kernels may differ from eager by a summation-order ulp): the
    cache-writing kernel's q_out and cached K are the plain kernel's q_out and k_out, bit for bit,
    and V is copied unchanged."""
    _, outputs, _ = interpreted
    args, _, _, rows, positions = _write_cases()[name]
    q_out, k_stack, v_stack = outputs[f"write_kernel/{name}"]
    plain_q, plain_k = outputs[f"write_plain/{name}"]
    v = args[2]
    assert torch.equal(q_out, plain_q)
    for b in range(q_out.shape[0]):
        for pos in range(q_out.shape[2]):
            slot, dest = int(rows[b]), int(positions[b]) + pos
            assert torch.equal(k_stack[TARGET_LAYER, slot, :, dest], plain_k[b, :, pos]), (name, b, pos)
            assert torch.equal(v_stack[TARGET_LAYER, slot, :, dest], v[b, pos]), (name, b, pos)


def test_write_kv_kernel_skips_destinations_outside_the_cache(interpreted):
    """A row whose slot or position lies outside the cache writes nothing (no stray write into the
    neighbouring layers or slots); the rows in range are written, q_out is computed for every row."""
    _, outputs, _ = interpreted
    name = "bf16-out_of_range-exactvar"
    case = _write_cases()[name]
    got = outputs[f"write_kernel/{name}"]
    want = _expected_write(case)
    _assert_write_equal(got, want, name)
    written = (want[1] != SENTINEL).any(dim=-1)   # [layers, S, KV, P]
    assert written.sum() == 8 and written[TARGET_LAYER, 2, :, 3].all(), "only row 2 (slot 2, position 3) is in range"


@pytest.mark.parametrize("name, block_h", WRITE_FORCED, ids=[f"{n}-bh{b}" for n, b in WRITE_FORCED])
def test_write_kv_every_head_tiling_is_exact(interpreted, name, block_h):
    """One head per program up to tiles wider than the KV heads: the v tiles start right after the
    k tiles whatever the tiling."""
    _, outputs, _ = interpreted
    got = outputs[f"write_forced/{name}/bh{block_h}"]
    _assert_write_equal(got, _expected_write(_write_cases()[name]), f"{name} block_h={block_h}")


@pytest.mark.parametrize("name", _WRITE_EXACT)
def test_write_kv_dispatcher_uses_triton_when_forced(interpreted, name):
    _, outputs, _ = interpreted
    info = outputs["write_info"]
    assert info["failure"] is None and info["loaded_launcher"], info
    _assert_write_equal(outputs[f"write_dispatch/{name}"], outputs[f"write_kernel/{name}"], name)


# ---------------------------------------------------------------------------------------------
# The deferred input norm (norm_source): kernel in the interpreter child

# Rows' mean squares for the "pow2" cases, alternating over the tokens: s = rsqrt(64 + 1e-6) = 1/8
# and rsqrt(256 + 1e-6) = 1/16 exactly (1e-6 is below half an fp32 ulp of 64), so q, k, v times s
# stay on the exact_var grid and every variance in the op is order free: bit for bit in all dtypes.
POW2_MEAN_SQUARES = (64, 256)
NORM_FORCED = [("bf16-talker-h2048-pow2", bh) for bh in (1, 2, 16)] + [("fp32-predictor_l2-h1000-pow2", 4)]


@functools.lru_cache(maxsize=None)
def _square_quads(total: int) -> torch.Tensor:
    """Every (a, b, c, d) of integers in [0, sqrt(total)] with a^2 + b^2 + c^2 + d^2 == total."""
    values = torch.arange(int(total ** 0.5) + 1)
    quads = torch.cartesian_prod(values, values, values, values)
    return quads[(quads ** 2).sum(-1) == total]


def _pow2_norm_rows(batch, seq_len, width, gen):
    """[B, L, width] integers (width % 4 == 0; |h| <= 32, exact in every dtype, sums of squares exact in
    fp32 in any order) whose mean square is exactly POW2_MEAN_SQUARES[token index % 2]: groups of 4 are
    random solutions of a^2 + b^2 + c^2 + d^2 = 4 * mean square, with random signs, shuffled."""
    rows = torch.empty(batch * seq_len, width)
    for token in range(batch * seq_len):
        quads = _square_quads(4 * POW2_MEAN_SQUARES[token % 2])
        picks = quads[torch.randint(len(quads), (width // 4,), generator=gen)].flatten().float()
        signs = torch.randint(0, 2, (width,), generator=gen) * 2 - 1
        rows[token] = (picks * signs)[torch.randperm(width, generator=gen)]
    return rows.view(batch, seq_len, width)


def _norm_source(kind, batch, seq_len, width, dtype, gen, layout="contiguous"):
    """norm_source [B, L, width] in dtype. kind "pow2": _pow2_norm_rows; "grid": random integers in
    [-16, 16] (the variance is still exact in any order, but s is an arbitrary fp32 value, so x * s
    really rounds); "randn": Gaussian (the kernel's variance may differ from eager's by an ulp).
    layout "strided": last dim stride 2 (the launcher must copy); "rowview": the first half of a
    twice-as-wide tensor (row stride 2 * width, read in place)."""
    if kind == "pow2":
        rows = _pow2_norm_rows(batch, seq_len, width, gen)
    elif kind == "grid":
        rows = torch.randint(-16, 17, (batch, seq_len, width), generator=gen).float()
    else:
        rows = torch.randn(batch, seq_len, width, generator=gen) * 3.0
    rows = rows.to(dtype)
    if layout == "strided":
        return torch.stack((rows, torch.zeros_like(rows)), dim=-1)[..., 0]
    if layout == "rowview":
        return torch.cat((rows, torch.full_like(rows, 1000.0)), dim=-1)[..., :width]
    return rows


def _norm_cases():
    """name -> (write case, norm_source). Names: dtype-shape-hWIDTH-kind[-layout]."""
    cases = {}
    shapes = {"talker": "pow2", "predictor_l2": "pow2"}   # the real GQA config, L = 1 and L = 2
    for kind in ("pow2", "grid"):
        for shape_name in shapes:
            for width in (1024, 2048, 1000):
                for dname in DTYPES:
                    cases[f"{dname}-{shape_name}-h{width}-{kind}"] = (shape_name, DTYPES[dname], width, kind, "contiguous")
    for dname in DTYPES:
        cases[f"{dname}-small_l1-h1024-pow2"] = ("small_l1", DTYPES[dname], 1024, "pow2", "contiguous")
        cases[f"{dname}-small_l2-h1000-pow2"] = ("small_l2", DTYPES[dname], 1000, "pow2", "contiguous")
        cases[f"{dname}-talker-h2048-randn"] = ("talker", DTYPES[dname], 2048, "randn", "contiguous")
        cases[f"{dname}-small_l2-h1000-randn"] = ("small_l2", DTYPES[dname], 1000, "randn", "contiguous")
    cases["bf16-talker-h3000-pow2"] = ("talker", torch.bfloat16, 3000, "pow2", "contiguous")        # 2 chunks, masked tail
    cases["bf16-predictor_l2-h8192-pow2"] = ("predictor_l2", torch.bfloat16, 8192, "pow2", "contiguous")  # 4 chunks
    cases["bf16-talker-h2048-pow2-strided"] = ("talker", torch.bfloat16, 2048, "pow2", "strided")
    cases["fp16-predictor_l2-h1000-pow2-rowview"] = ("predictor_l2", torch.float16, 1000, "pow2", "rowview")
    built = {}
    for seed, (name, (shape_name, dtype, width, kind, layout)) in enumerate(cases.items()):
        # pow2: q/k/v on the exact_var grid, so they stay on it once scaled by 1/8 or 1/16
        case = _write_case(shape_name, dtype, seed=200 + seed, exact_var=kind == "pow2")
        batch, seq_len = case[0][0].shape[:2]
        gen = torch.Generator().manual_seed(300 + seed)
        built[name] = case, _norm_source(kind, batch, seq_len, width, dtype, gen, layout)
    return built


def _prescaled(case, norm_source):
    """The write case with q, k, v replaced by the reference's scaled values (apply_norm_scale)."""
    (q, k, v, *rest), k_stack, v_stack, rows, positions = case
    scale = inverse_rms(norm_source, EPS)
    return (*(apply_norm_scale(t, scale) for t in (q, k, v)), *rest), k_stack, v_stack, rows, positions


def _assert_write_close(got, want, name):
    """Within the bound of a variance that moved by one fp32 ulp (the kernel sums squares in another
    order than torch; the same bound as tests/test_qk_norm_rope.py's Gaussian cases): fp32 within 1e-6
    absolute + 2^-21 relative; bf16/fp16 at most 1 in 1000 elements differ, by at most 2 ulp. Seen in
    the interpreter: fp32 differs in up to a quarter of q_out (a few ulp; many ulp only near zero,
    within the 1e-6), V in 1% (<= 2 ulp: s itself moved) on Gaussian norm_source only; bf16 and fp16
    none at all."""
    for what, g, w in zip(("q_out", "k cache", "v cache"), got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, f"{name}: {what}"
        if g.dtype == torch.float32:
            torch.testing.assert_close(g, w, atol=1e-6, rtol=2.0 ** -21, msg=lambda m: f"{name}: {what}: {m}")
            continue
        ulps = ulp_distance(g, w)
        flips = int((ulps > 0).sum())
        assert flips <= 1e-3 * ulps.numel() and int(ulps.max()) <= 2, (
            f"{name}: {what}: {flips} of {ulps.numel()} elements differ, max {int(ulps.max())} ulp")


_NORM_EXACT = [n for n in _norm_cases() if "-pow2" in n]
_NORM_GRID = [n for n in _norm_cases() if n.endswith("-grid")]
_NORM_RANDN = [n for n in _norm_cases() if n.endswith("-randn")]


def test_norm_reference_scales_as_rmsnorm_reference_normalises():
    """s is kernels/rmsnorm_reference.py's factor: h scaled by it is rms_norm_reference(h) with a unit
    weight, bit for bit; and the reference with norm_source is the plain reference on pre-scaled
    q, k, v (V written scaled)."""
    for name in ("bf16-talker-h2048-randn", "fp16-small_l2-h1000-randn", "fp32-talker-h2048-randn"):
        case, norm_source = _norm_cases()[name]
        ones = torch.ones(norm_source.shape[-1], dtype=norm_source.dtype)
        scaled = apply_norm_scale(norm_source[:, :, None], inverse_rms(norm_source, EPS))[:, :, 0]
        assert torch.equal(scaled, rms_norm_reference(norm_source, ones, EPS)), name
        _assert_write_equal(_norm_reference(case, norm_source), _expected_write(_prescaled(case, norm_source)), name)


def test_norm_cases_scale_as_designed():
    """pow2: every token's s is 1/8 or 1/16 exactly (both occur) in the reference; grid: s is no power
    of two and the scaled q really rounds in bf16/fp16 (the rounding step is exercised)."""
    cases = _norm_cases()
    for name in _NORM_EXACT:
        scale = inverse_rms(cases[name][1], EPS).flatten()
        assert set(scale.tolist()) <= {1 / 8, 1 / 16} and (scale == 1 / 8).any(), name
        if scale.numel() > 1:
            assert (scale == 1 / 16).any(), name
    for name in _NORM_GRID:
        case, norm_source = cases[name]
        scale = inverse_rms(norm_source, EPS)
        assert not (torch.frexp(scale).mantissa == 0.5).any(), name
        q = case[0][0]
        if q.dtype != torch.float32:
            assert not torch.equal(apply_norm_scale(q, scale).float(), q.float() * scale[..., None]), name


@pytest.mark.parametrize("name", _NORM_EXACT)
def test_norm_kernel_is_bit_identical_to_reference(interpreted, name):
    """Variances order free (pow2 cases): q_out and every element of both cache stacks equal the
    reference bit for bit in fp32/bf16/fp16, H_model 1024/2048/1000 (and 3000, 8192: several chunks),
    L 1 and 2, 16/8 heads of 128 and 4/2 of 32, norm_source contiguous, last-dim strided or a row view."""
    _, outputs, _ = interpreted
    case, norm_source = _norm_cases()[name]
    got = outputs[f"norm_kernel/{name}"]
    assert got[0].is_contiguous()
    _assert_write_equal(got, _norm_reference(case, norm_source), name)
    _assert_write_equal(got, _expected_write(_prescaled(case, norm_source)), name)


@pytest.mark.parametrize("name", _NORM_GRID)
def test_norm_kernel_with_arbitrary_scale(interpreted, name):
    """s an arbitrary fp32 value, computed exactly (integer rows: the sum of squares is order free), on
    Gaussian q/k/v: V, which is only scaled and rounded, equals the reference bit for bit; q_out and
    cached K are bit for bit the kernel without norm_source on the reference's scaled q/k/v (so the
    scaling adds exactly the reference's rounding); against the reference, q_out and K differ only
    where a per-head variance sum moved by an ulp (as without norm_source)."""
    _, outputs, _ = interpreted
    case, norm_source = _norm_cases()[name]
    got = outputs[f"norm_kernel/{name}"]
    want = _norm_reference(case, norm_source)
    assert torch.equal(got[2], want[2]), f"{name}: v cache: {int((got[2] != want[2]).sum())} elements differ"
    _assert_write_equal(got, outputs[f"norm_prescaled/{name}"], name)
    _assert_write_close(got, want, name)


@pytest.mark.parametrize("name", _NORM_RANDN)
def test_norm_kernel_matches_reference_on_gaussian_inputs(interpreted, name):
    """Gaussian norm_source and q/k/v: the chunked sum of squares may move s by one fp32 ulp, and the
    per-head variances as without norm_source; bounded like those (_assert_write_close)."""
    _, outputs, _ = interpreted
    case, norm_source = _norm_cases()[name]
    _assert_write_close(outputs[f"norm_kernel/{name}"], _norm_reference(case, norm_source), name)


@pytest.mark.parametrize("name, block_h", NORM_FORCED, ids=[f"{n}-bh{b}" for n, b in NORM_FORCED])
def test_norm_every_head_tiling_is_exact(interpreted, name, block_h):
    """Every program computes s itself, whatever heads it holds: one head per program up to tiles
    wider than the KV heads."""
    _, outputs, _ = interpreted
    case, norm_source = _norm_cases()[name]
    _assert_write_equal(outputs[f"norm_forced/{name}/bh{block_h}"], _norm_reference(case, norm_source),
                        f"{name} block_h={block_h}")


@pytest.mark.parametrize("name", _NORM_EXACT)
def test_norm_dispatcher_uses_triton_when_forced(interpreted, name):
    _, outputs, _ = interpreted
    info = outputs["write_info"]
    assert info["failure"] is None and info["loaded_launcher"], info
    _assert_write_equal(outputs[f"norm_dispatch/{name}"], outputs[f"norm_kernel/{name}"], name)


@pytest.mark.parametrize("name", _WRITE_EXACT)
def test_no_norm_source_is_the_op_as_before(interpreted, name):
    """norm_source=None passed explicitly (norm_eps then ignored): the kernel's results of the call
    without it, bit for bit (V still a bit copy), through the kernel and the dispatcher."""
    _, outputs, _ = interpreted
    _assert_write_equal(outputs[f"write_none/{name}"], outputs[f"write_kernel/{name}"], name)
    _assert_write_equal(outputs[f"write_none_dispatch/{name}"], outputs[f"write_kernel/{name}"], name)


# ---------------------------------------------------------------------------------------------
# The model's cache stores on the Triton route (interpreter child) vs the eager route


def _model_decode_run() -> dict:
    """A 2-layer bf16 stack (4 heads, 2 KV heads, head_dim 16) with seeded weights through the model's
    own KV stores: a slot prefill (plain op), a talker decode step over SlotDecodeView (rows [2, 0]
    at positions [5, 3]) and a code-predictor frame's first two steps over FrameKVCache (offset 0 with
    2 tokens, then offset 2). -> outputs and both caches."""
    from talker_service.model.config import DecoderStackConfig
    from talker_service.model.kv_cache import FrameKVCache, SlotDecodeView, SlotKVCache, SlotPrefillView, causal_mask
    from talker_service.model.layers import DecoderStack

    config = DecoderStackConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                                num_key_value_heads=2, head_dim=16, vocab_size=32, num_code_groups=16,
                                rms_norm_eps=1e-6, rope_theta=10000.0, attention_bias=False)
    gen = torch.Generator().manual_seed(31)
    stack = DecoderStack(config)
    with torch.no_grad():
        for param in stack.parameters():
            noise = torch.randn(param.shape, generator=gen)
            # O(1) activations: matrices scaled by 1/sqrt(fan_in), norm weights around 1
            param.copy_(noise / param.shape[1] ** 0.5 if param.dim() == 2 else 1.0 + 0.25 * noise)
    stack = stack.to(torch.bfloat16).eval()
    stack.fuse_projections()
    cos_table, sin_table = rope_tables(16, 10000.0, 16, torch.bfloat16, "cpu")
    out = {}
    with torch.no_grad():
        cache = SlotKVCache(2, 4, 2, 8, 16, torch.bfloat16, "cpu")
        for slot, length in ((0, 3), (2, 5)):
            x = torch.randn(1, length, 64, generator=gen).to(torch.bfloat16)
            view = SlotPrefillView(cache, torch.tensor([slot]), 0, length)
            out[f"prefill{slot}"] = stack.run(x, cos_table[None, :length], sin_table[None, :length], view,
                                              causal_mask(0, length, "cpu"))
        slots, positions = torch.tensor([2, 0]), torch.tensor([5, 3])
        x = torch.randn(2, 1, 64, generator=gen).to(torch.bfloat16)
        out["decode"] = stack.run(x, cos_table[positions][:, None], sin_table[positions][:, None],
                                  SlotDecodeView(cache, slots, positions), None)
        out["slot_cache"] = (cache.k, cache.v)

        frame = FrameKVCache(2, 3, 2, 16, 16, torch.bfloat16, "cpu")
        frame.k.fill_(SENTINEL)   # empty() in the model: only the written positions are ever read
        frame.v.fill_(SENTINEL)
        for offset, length in ((0, 2), (2, 1)):   # the frame cache is causal by position: no mask
            frame.offset = offset
            x = torch.randn(3, length, 64, generator=gen).to(torch.bfloat16)
            cos = cos_table[offset:offset + length].expand(3, length, -1)
            sin = sin_table[offset:offset + length].expand(3, length, -1)
            out[f"frame{offset}"] = stack.run(x, cos, sin, frame, None)
        out["frame_cache"] = (frame.k, frame.v)
    return out


def test_model_cache_stores_on_the_triton_route_equal_the_eager_route(interpreted, fresh_dispatcher):
    """Bit for bit in bf16: the stores hand the kernel the right cache, rows and positions (the
    predictor's an expanded offset), prefill and decode agree on where keys live, and the frame
    cache is written at offsets 0, 1 and 2 only."""
    _, outputs, _ = interpreted
    assert outputs["model_info"]["write_kv_calls"] == 2 * (1 + 2) and outputs["model_info"]["plain_calls"] == 2 * 2
    eager = _model_decode_run()
    for name, want in eager.items():
        got = outputs[f"model/{name}"]
        for g, w in zip(got, want) if isinstance(want, tuple) else ((got, want),):
            assert torch.equal(g, w), f"{name}: {int((g != w).sum())} of {g.numel()} elements differ"
    frame_k = eager["frame_cache"][0]
    assert (frame_k[:, :, :, :3] != SENTINEL).all() and (frame_k[:, :, :, 3:] == SENTINEL).all()


# ---------------------------------------------------------------------------------------------
# The deferred input norm on the GPU (real shapes)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("width", [1024, 2048])   # the code predictor's and the talker's H_model
@pytest.mark.parametrize("batch", [1, 256])
def test_write_kv_norm_on_the_gpu_matches_the_reference(batch, width):
    """bf16, L=1, 16 q / 8 KV heads of 128, q/k/v views of one fused projection, rows written out of
    order: the kernel (and the dispatcher, which must take it) against the reference on the same GPU.
    torch's CUDA mean and rsqrt may round s differently from the kernel's by an fp32 ulp and the
    per-head variances sum in another order: bounded as in the interpreter (_assert_write_close)."""
    from kernels.qk_norm_rope_triton import qk_norm_rope_write_kv_triton

    num_heads, num_kv, head_dim, num_positions = 16, 8, 128, 16
    q, k, v, qw, kw, cos, sin = _make_case((batch, 1, num_heads, num_kv, head_dim), torch.bfloat16, seed=400 + batch,
                                           with_v=True)
    fused = torch.cat([t.flatten(2) for t in (q, k, v)], dim=-1).cuda()   # one projection output, views of it
    q, k, v = (part.unflatten(-1, (-1, head_dim)) for part in fused.split(
        (num_heads * head_dim, num_kv * head_dim, num_kv * head_dim), dim=-1))
    gen = torch.Generator().manual_seed(500 + width)
    norm_source = (torch.randn(batch, 1, width, generator=gen) * 3).bfloat16().cuda()
    stack = torch.full((CACHE_LAYERS, batch + 1, num_kv, num_positions, head_dim), SENTINEL, dtype=torch.bfloat16,
                       device="cuda")
    rows = torch.randperm(batch + 1, generator=gen)[:batch].cuda()
    positions = torch.randint(0, num_positions, (batch,), generator=gen).cuda()
    case = ((q, k, v, qw.cuda(), kw.cuda(), cos.cuda(), sin.cuda()), stack, stack.clone(), rows, positions)
    norm = (norm_source, EPS)
    want = _run_write(qk_norm_rope_write_kv_reference, case, norm=norm)
    got = _run_write(qk_norm_rope_write_kv_triton, case, norm=norm)
    torch.cuda.synchronize()
    _assert_write_close([t.cpu() for t in got], [t.cpu() for t in want], f"B={batch} H_model={width}")
    with torch.no_grad():
        dispatched = _run_write(qkr.qk_norm_rope_write_kv, case, norm=norm)
    assert qkr.write_kv_triton_failure() is None
    _assert_write_equal([t.cpu() for t in dispatched], [t.cpu() for t in got], "dispatcher")


# ---------------------------------------------------------------------------------------------
# Ahead-of-time compile for Hopper (no GPU needed)


@pytest.mark.parametrize("has_norm", [False, True], ids=["plain", "deferred_norm"])
def test_write_kv_kernel_compiles_for_hopper_without_fma(has_norm):
    """The cache-writing kernel: all three tile classes compile for sm_90, no FMA contraction (with
    the deferred norm too: its squares must not fuse into the sum, nor v * s into anything)."""
    from kernels import qk_norm_rope_triton as qkt

    skip_if_interpreting(qkt)
    import inspect

    names = list(inspect.signature(qkt._qk_norm_rope_write_kv_kernel.fn).parameters)
    constexprs = {"BLOCK_H": 1, "HALF": 64, "ROUND": 1, "HAS_NORM": has_norm,
                  "NORM_BLOCK": qkt.NORM_CHUNK if has_norm else 1, "NORM_CHUNKS": 2 if has_norm else 0}
    index_ptrs = ("rows_ptr", "starts_ptr")
    floats = ("eps", "norm_eps", "norm_cols_f")
    signature = {n: "constexpr" if n in constexprs else "*i64" if n in index_ptrs else
                 "*bf16" if n.endswith("_ptr") else "fp32" if n in floats else "i32" for n in names}
    # the index tensors' pointers and strides (1, or 0 when expanded) are not 16-divisible
    divisible = [i for i, n in enumerate(names) if (n.endswith("_ptr") or "stride" in n)
                 and not n.startswith(("rows_", "starts_"))]
    kernel = compile_for_hopper(qkt._qk_norm_rope_write_kv_kernel, signature, constexprs, divisible,
                                num_warps=1, **qkt.LAUNCH_OPTIONS)
    ptx = kernel.asm["ptx"]
    assert "rsqrt.approx" in ptx
    assert not re.search(r"\bfma\.rn\.f32", ptx), "FMA contraction changes the eager rounding"


# ---------------------------------------------------------------------------------------------
# Child process body


def _run_child(work_dir: Path) -> None:
    from kernels.qk_norm_rope_triton import is_interpreting

    outputs = {}
    _run_write_child(outputs)
    _run_norm_child(outputs)
    outputs["write_info"] = {"failure": qkr.write_kv_triton_failure(),
                             "loaded_launcher": qkr._write_kv_route.launcher is not None}
    _run_model_child(outputs)
    save_child_results(work_dir, outputs, qkr, is_interpreting())


def _run_model_child(outputs: dict) -> None:
    """The model's stores with both ops on the Triton route, counting the launcher calls."""
    from kernels import qk_norm_rope_triton as qkt

    calls = {"write_kv_calls": 0, "plain_calls": 0}
    qkr._write_kv_route.launcher = counting(qkt.qk_norm_rope_write_kv_triton, calls, "write_kv_calls")
    qkr._route.launcher = counting(qkt.qk_norm_rope_triton, calls, "plain_calls")
    for name, value in _model_decode_run().items():
        outputs[f"model/{name}"] = value
    outputs["model_info"] = calls


def _run_write_child(outputs: dict) -> None:
    from kernels.qk_norm_rope_triton import qk_norm_rope_triton, qk_norm_rope_write_kv_triton

    cases = _write_cases()
    for name, case in cases.items():
        outputs[f"write_kernel/{name}"] = _run_write(qk_norm_rope_write_kv_triton, case)
        if name.endswith("randn"):
            q, k, _, qw, kw, cos, sin = case[0]
            outputs[f"write_plain/{name}"] = qk_norm_rope_triton(q, k, qw, kw, cos, sin, EPS)
        if name in _WRITE_EXACT:
            outputs[f"write_dispatch/{name}"] = _run_write(qkr.qk_norm_rope_write_kv, case)
    for name, block_h in WRITE_FORCED:
        outputs[f"write_forced/{name}/bh{block_h}"] = _run_write(qk_norm_rope_write_kv_triton, cases[name],
                                                                 block_h=block_h)
    for name in _WRITE_EXACT:   # norm_source None passed explicitly; the eps beside it must not matter
        outputs[f"write_none/{name}"] = _run_write(qk_norm_rope_write_kv_triton, cases[name], norm=(None, 0.25))
        outputs[f"write_none_dispatch/{name}"] = _run_write(qkr.qk_norm_rope_write_kv, cases[name], norm=(None, 0.25))


def _run_norm_child(outputs: dict) -> None:
    from kernels.qk_norm_rope_triton import qk_norm_rope_write_kv_triton

    cases = _norm_cases()
    for name, (case, norm_source) in cases.items():
        outputs[f"norm_kernel/{name}"] = _run_write(qk_norm_rope_write_kv_triton, case, norm=(norm_source, EPS))
        if name in _NORM_GRID:
            outputs[f"norm_prescaled/{name}"] = _run_write(qk_norm_rope_write_kv_triton, _prescaled(case, norm_source))
        if name in _NORM_EXACT:
            outputs[f"norm_dispatch/{name}"] = _run_write(qkr.qk_norm_rope_write_kv, case, norm=(norm_source, EPS))
    for name, block_h in NORM_FORCED:
        case, norm_source = cases[name]
        outputs[f"norm_forced/{name}/bh{block_h}"] = _run_write(qk_norm_rope_write_kv_triton, case,
                                                                norm=(norm_source, EPS), block_h=block_h)


if __name__ == "__main__":
    child_main(_run_child)
