"""The one-launch decode attention (kernels/norm_rope_attend*.py): q/k-norm + RoPE + KV write and the
slot decode attention in one Triton program per (row, kv head).

- In the Triton interpreter (one child process, TRITON_INTERPRET=1), the kernel against the two
  kernels it replaces, launched one after the other: q_out, both caches and the attention output
  equal bit for bit (the interpreter rounds every product, so the FMA setting cannot differ), for the
  talker's slot cache (rows out of order, several key tiles) and the code predictor's frame cache
  (rows in order, one expanded position and length), with and without the deferred input norm,
  GQA groups of 1, 2 and 4, and a destination outside the cache (skipped, as the write kernel skips it).
- The same outputs against the eager references of the pair (close, not equal: another attention).
- The dispatcher: takes the kernel when allowed, the pair otherwise (QWEN3_TTS_FUSED_ATTENTION=0, CPU
  without the env var, a recorded failure), argument errors before any launch.
- The model's decode stores route their one-token steps through it, with the same results as the pair.
- An sm_90 compile (no GPU needed), and on a GPU the real shapes against the pair.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from triton_support import (child_main, compile_for_hopper, counting, fresh_route, run_interpreter_child,
                            save_child_results, skip_if_interpreting)
import kernels.norm_rope_attend as nra
from kernels.qk_norm_rope_reference import qk_norm_rope_write_kv_reference
from kernels.slot_attention_reference import slot_decode_attention_reference

EPS = 1e-6
SENTINEL = 7.0
# name: (batch, heads, kv heads, head_dim, cache rows, positions, kind)
SHAPES = {
    "talker": (5, 4, 2, 32, 7, 150, "slots"),       # rows out of order, lengths over up to 3 key tiles
    "talker_mha": (3, 2, 2, 16, 4, 40, "slots"),   # GQA group 1
    "talker_gqa4": (3, 8, 2, 32, 3, 70, "slots"),  # GQA group 4
    "predictor": (4, 4, 2, 32, 4, 16, "frame"),    # the frame cache: rows in order, one offset
}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def _case(shape_name: str, dtype: torch.dtype, seed: int, with_norm: bool, out_of_range: bool = False):
    batch, heads, kv, dim, rows_total, positions, kind = SHAPES[shape_name]
    gen = torch.Generator().manual_seed(seed)
    width = (heads + 2 * kv) * dim
    fused = (torch.randn(batch, 1, width, generator=gen) * 2).to(dtype)   # one projection's output
    q, k, v = (t.unflatten(-1, (-1, dim)) for t in fused.split((heads * dim, kv * dim, kv * dim), dim=-1))
    qw = (1.0 + 0.25 * torch.randn(dim, generator=gen)).to(dtype)
    kw = (1.0 + 0.25 * torch.randn(dim, generator=gen)).to(dtype)
    if kind == "slots":
        dest_rows = torch.randperm(rows_total, generator=gen)[:batch]
        dest_positions = torch.randint(0, positions, (batch,), generator=gen)
        slots, lengths = dest_rows, dest_positions + 1
    else:
        dest_rows = torch.arange(batch)
        offset = 9
        dest_positions = torch.tensor(offset).expand(batch)
        slots, lengths = dest_rows, torch.tensor(offset + 1).expand(batch)
    if out_of_range:   # row 0 writes outside the cache: skipped, and it attends over what is there
        dest_rows = dest_rows.clone()
        dest_rows[0] = rows_total
    angle = torch.randn(batch, 1, dim // 2, generator=gen)
    cos = torch.cat((angle.cos(), angle.cos()), -1).to(dtype)
    sin = torch.cat((angle.sin(), angle.sin()), -1).to(dtype)
    cache_shape = (rows_total, kv, positions, dim)
    k_cache = torch.randn(cache_shape, generator=gen).to(dtype)   # earlier keys of every row
    v_cache = torch.randn(cache_shape, generator=gen).to(dtype)
    norm = (torch.randn(batch, 1, 48, generator=gen) * 3).to(dtype) if with_norm else None
    return dict(q=q, k=k, v=v, qw=qw, kw=kw, cos=cos, sin=sin, k_cache=k_cache, v_cache=v_cache, dest_rows=dest_rows,
                dest_positions=dest_positions, slots=slots, lengths=lengths, scale=dim ** -0.5, norm=norm)


def _cases():
    cases = {}
    for shape_name in SHAPES:
        for dname, dtype in DTYPES.items():
            for with_norm in (False, True):
                name = f"{dname}-{shape_name}-{'norm' if with_norm else 'plain'}"
                cases[name] = _case(shape_name, dtype, seed=10 + len(cases), with_norm=with_norm)
    cases["bf16-talker-norm-out_of_range"] = _case("talker", torch.bfloat16, seed=90, with_norm=True, out_of_range=True)
    return cases


def _run_fused(fn, c):
    """fn = the launcher (returns (out, q_out)) -> (out, q_out, k_cache, v_cache) on fresh caches."""
    k_cache, v_cache = c["k_cache"].clone(), c["v_cache"].clone()
    out, q_out = fn(c["q"], c["k"], c["v"], c["qw"], c["kw"], c["cos"], c["sin"], EPS, k_cache, v_cache,
                    c["dest_rows"], c["dest_positions"], c["slots"], c["lengths"], c["scale"], c["norm"], EPS,
                    one_launch=True)
    return out, q_out, k_cache, v_cache


def _run_dispatch(c):
    k_cache, v_cache = c["k_cache"].clone(), c["v_cache"].clone()
    out = nra.norm_rope_attend(c["q"], c["k"], c["v"], c["qw"], c["kw"], c["cos"], c["sin"], EPS, k_cache, v_cache,
                               c["dest_rows"], c["dest_positions"], c["slots"], c["lengths"], c["scale"], c["norm"],
                               EPS)
    return out, k_cache, v_cache


def _run_pair(write_kv, attend, c):
    """The two kernels (or references) one after the other -> (out, q_out, k_cache, v_cache)."""
    k_cache, v_cache = c["k_cache"].clone(), c["v_cache"].clone()
    q_out = write_kv(c["q"], c["k"], c["v"], c["qw"], c["kw"], c["cos"], c["sin"], EPS, k_cache, v_cache,
                     c["dest_rows"], c["dest_positions"], c["norm"], EPS)
    out = attend(q_out[:, :, 0], k_cache, v_cache, c["slots"], c["lengths"], c["scale"])
    return out, q_out, k_cache, v_cache


def _reference(c):
    return _run_pair(qk_norm_rope_write_kv_reference, slot_decode_attention_reference, c)


@pytest.fixture(scope="module")
def interpreted(tmp_path_factory):
    work_dir = tmp_path_factory.mktemp("norm_rope_attend_interp")
    info = run_interpreter_child(__file__, work_dir, nra.CPU_TRITON_ENV, timeout=600)
    assert info["is_interpreting"], "the child must run the Triton interpreter, not a GPU kernel"
    return torch.load(work_dir / "outputs.pt"), info


@pytest.mark.parametrize("name", list(_cases()))
def test_kernel_equals_the_two_kernels_it_replaces(interpreted, name):
    outputs, _ = interpreted
    fused, pair = outputs[f"fused/{name}"], outputs[f"pair/{name}"]
    for label, got, want in zip(("out", "q_out", "k_cache", "v_cache"), fused, pair):
        assert torch.equal(got, want), f"{name} {label}: {int((got != want).sum())} of {got.numel()} differ"


@pytest.mark.parametrize("name", [n for n in _cases() if not n.endswith("out_of_range")])  # the reference raises
def test_kernel_matches_the_eager_references(interpreted, name):
    """The caches and q_out as the write reference makes them (its variance may round one fp32 ulp
    apart), the output close to the eager attention over them; untouched positions keep their values."""
    outputs, _ = interpreted
    c = _cases()[name]
    out, q_out, k_cache, v_cache = outputs[f"fused/{name}"]
    want_out, want_q, want_k, want_v = _reference(c)
    tol = dict(atol=2e-2, rtol=2e-2) if c["q"].dtype == torch.bfloat16 else dict(atol=1e-5, rtol=1e-5)
    for label, got, want in (("q_out", q_out, want_q), ("k_cache", k_cache, want_k), ("v_cache", v_cache, want_v),
                             ("out", out, want_out)):
        torch.testing.assert_close(got.float(), want.float(), **tol, msg=lambda m: f"{name} {label}: {m}")
    written = torch.zeros(k_cache.shape[:3], dtype=torch.bool)
    for b, (row, pos) in enumerate(zip(c["dest_rows"].tolist(), c["dest_positions"].tolist())):
        if row < k_cache.shape[0]:
            written[row, :, pos] = True
    assert torch.equal(k_cache[~written], c["k_cache"][~written]) and torch.equal(v_cache[~written],
                                                                                 c["v_cache"][~written])


def test_a_destination_outside_the_cache_is_skipped(interpreted):
    """Row 0's destination is past the last cache row: nothing of it is written anywhere, the other
    rows' keys are, and row 0 still attends over its slot as it stands."""
    outputs, _ = interpreted
    c = _cases()["bf16-talker-norm-out_of_range"]
    _, _, k_cache, v_cache = outputs["fused/bf16-talker-norm-out_of_range"]
    changed = (k_cache != c["k_cache"]).any(-1)   # [rows, kv, positions]
    for b, (row, pos) in enumerate(zip(c["dest_rows"].tolist(), c["dest_positions"].tolist())):
        if b:
            changed[row, :, pos] = False
    assert not changed.any()


def test_dispatcher_took_the_kernel_and_returns_its_output(interpreted):
    """Over the short cache the launcher's own choice is the one launch; over the long ones it is the
    pair, which gives the same bits in the interpreter."""
    outputs, info = interpreted
    assert info["dispatcher_failure"] is None and info["dispatcher_loaded_launcher"]
    for name in _cases():
        got, want = outputs[f"dispatch/{name}"], outputs[f"fused/{name}"]
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[2]) and torch.equal(got[2], want[3]), name


def test_model_stores_route_one_token_steps_through_the_kernel(interpreted):
    """The code predictor frame's one-token step takes the kernel (2 layers); the frame's two-token
    first step and the talker's decode step over its slot cache keep the write kernel and the
    attention; the results equal the pair's (its two Triton kernels) bit for bit."""
    outputs, _ = interpreted
    assert outputs["model_info/fused"] == {"fused_calls": 2, "write_kv_calls": 4}
    assert outputs["model_info/pair"] == {"fused_calls": 0, "write_kv_calls": 6}
    for key in [k for k in outputs if k.startswith("model_fused/")]:
        got, want = outputs[key], outputs[key.replace("model_fused/", "model_pair/")]
        for g, w in zip(got, want) if isinstance(want, tuple) else ((got, want),):
            assert torch.equal(g, w), f"{key}: {int((g != w).sum())} of {g.numel()} differ"


# ---------------------------------------------------------------------------------------------
# The dispatcher in process (eager: no kernel here)


@pytest.fixture
def fresh(monkeypatch):
    return fresh_route(monkeypatch, nra)


def test_without_the_kernel_the_dispatcher_runs_the_pair(fresh):
    """CPU tensors without the env var: the two ops (here their references) and no launcher loaded."""
    c = _cases()["bf16-talker-norm"]
    out, k_cache, v_cache = _run_dispatch(c)
    want = _reference(c)
    assert torch.equal(out, want[0]) and torch.equal(k_cache, want[2]) and torch.equal(v_cache, want[3])
    assert nra._route.launcher is None


def test_the_env_switch_and_a_recorded_failure_select_the_pair(fresh, monkeypatch):
    calls = []

    def launcher(*args):
        calls.append(1)
        raise RuntimeError("compile failed")

    monkeypatch.setattr(nra._route, "launcher", launcher)
    monkeypatch.setenv(nra.CPU_TRITON_ENV, "1")
    # the pair's kernels would take these tensors (on CPU their routes say no: their env vars are unset,
    # so when the pair runs it runs their references)
    monkeypatch.setattr(nra, "_pair_takes_triton", lambda *args: True)
    monkeypatch.setenv(nra.ENV, "0")
    c = _cases()["fp32-predictor-plain"]
    want = _reference(c)
    assert torch.equal(_run_dispatch(c)[0], want[0]) and not calls
    monkeypatch.setenv(nra.ENV, "1")
    assert torch.equal(_run_dispatch(c)[0], want[0]) and calls == [1]   # failed, fell back, recorded
    assert nra.triton_failure() == "RuntimeError: compile failed"
    assert torch.equal(_run_dispatch(c)[0], want[0]) and calls == [1]   # remembered: not tried again


@pytest.mark.parametrize("bad, match", [
    (lambda c: {**c, "q": c["q"].expand(-1, 2, -1, -1)}, "one token per row"),
    (lambda c: {**c, "lengths": c["lengths"][:2]}, "slots and lengths"),
    (lambda c: {**c, "slots": c["slots"].float()}, "int64/int32 slots"),
    (lambda c: {**c, "dest_rows": c["dest_rows"][:1]}, "dest_rows"),
    (lambda c: {**c, "norm": c["q"][:, :, 0, :5].clone()[:1]}, "norm_source"),
])
def test_bad_arguments_are_refused_before_any_launch(fresh, bad, match):
    c = bad(_cases()["fp32-talker-plain"])
    with pytest.raises(ValueError, match=match):
        _run_dispatch(c)


def test_pdl_launches_and_split_attention_keep_the_pair(monkeypatch):
    """Over a long cache, under PDL (the talker's 1-2 row graphs) and where the attention would split
    its keys, the launcher runs the two kernels; over the predictor's short cache the one launch."""
    from kernels import norm_rope_attend_triton as nrt

    cpu = torch.device("cpu")
    assert nrt.fused_launch_fits(256, 8, 16, 128, torch.bfloat16, cpu)
    assert not nrt.fused_launch_fits(256, 8, 256, 128, torch.bfloat16, cpu)   # the talker's long cache
    monkeypatch.setattr(nrt, "use_pdl", lambda device: True)
    assert not nrt.fused_launch_fits(256, 8, 16, 128, torch.bfloat16, cpu)
    monkeypatch.setattr(nrt, "use_pdl", lambda device: False)
    monkeypatch.setattr(nrt, "default_config", lambda *args: (64, 4, None, 4))   # a split launch
    assert not nrt.fused_launch_fits(2, 8, 4096, 128, torch.bfloat16, cpu)


# ---------------------------------------------------------------------------------------------
# Compile for Hopper (no GPU needed) and the GPU


@pytest.mark.parametrize("has_norm", [False, True], ids=["plain", "deferred_norm"])
def test_kernel_compiles_for_hopper_without_fma(has_norm):
    """All of the kernel compiles for sm_90 with the write kernel's no-contraction option."""
    import inspect
    import re

    from kernels import norm_rope_attend_triton as nrt
    from kernels.qk_norm_rope_triton import LAUNCH_OPTIONS

    skip_if_interpreting(nrt)
    names = list(inspect.signature(nrt._norm_rope_attend_kernel.fn).parameters)
    constexprs = {"GROUP": 2, "GROUP_PAD": 2, "HEAD_DIM": 128, "BLOCK_H": 16, "BLOCK_N": 16 if has_norm else 64,
                  "ROUND": 1, "HAS_NORM": has_norm, "NORM_BLOCK": 2048 if has_norm else 1,
                  "NORM_CHUNKS": 1 if has_norm else 0, "DOT_FP32": False,
                  "SINGLE_TILE": has_norm}   # the predictor's launch (one 16-key tile), and the key loop
    index_ptrs = ("rows_ptr", "starts_ptr", "slots_ptr", "lengths_ptr")
    floats = ("eps", "norm_eps", "norm_cols_f", "qk_scale")
    signature = {n: "constexpr" if n in constexprs else "*i64" if n in index_ptrs else
                 "*bf16" if n.endswith("_ptr") else "fp32" if n in floats else "i32" for n in names}
    divisible = [i for i, n in enumerate(names) if (n.endswith("_ptr") or "stride" in n)
                 and not n.startswith(("rows_", "starts_", "slots_", "lengths_"))]
    kernel = compile_for_hopper(nrt._norm_rope_attend_kernel, signature, constexprs, divisible, num_warps=4,
                                **LAUNCH_OPTIONS)
    ptx = kernel.asm["ptx"]
    assert "bar.sync" in ptx or "barrier.sync" in ptx, "the prologue's writes must be fenced before the key loop"
    assert not re.search(r"\bfma\.rn\.f32", ptx), "FMA contraction changes the prologue's eager rounding"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("kind", ["talker", "predictor"])
@pytest.mark.parametrize("batch", [1, 64, 256])
def test_real_shapes_on_the_gpu_equal_the_pair(kind, batch):
    """bf16 16/8 heads of 128 with the deferred norm (width 2048 talker, 1024 predictor): q_out and the
    caches bit for bit what the two kernels write, the output within one bf16 rounding of theirs."""
    from kernels.norm_rope_attend_triton import norm_rope_attend_triton
    from kernels.qk_norm_rope_triton import qk_norm_rope_write_kv_triton
    from kernels.slot_attention_triton import default_config, slot_decode_attention_triton

    gen = torch.Generator().manual_seed(batch)
    heads, kv, dim = 16, 8, 128
    positions, width = (256, 2048) if kind == "talker" else (16, 1024)
    # one_launch=True falls back to the pair where the attention would split its keys; then this
    # would compare the pair with itself. No shape here splits (256 positions is one split's minimum).
    assert default_config(batch, kv, positions, dim, torch.bfloat16, torch.device("cuda"))[3] == 1
    fused = (torch.randn(batch, 1, (heads + 2 * kv) * dim, generator=gen)).bfloat16().cuda()
    q, k, v = (t.unflatten(-1, (-1, dim)) for t in fused.split((heads * dim, kv * dim, kv * dim), dim=-1))
    qw, kw = ((1.0 + 0.25 * torch.randn(dim, generator=gen)).bfloat16().cuda() for _ in range(2))
    angle = torch.randn(batch, 1, dim // 2, generator=gen)
    cos = torch.cat((angle.cos(), angle.cos()), -1).bfloat16().cuda()
    sin = torch.cat((angle.sin(), angle.sin()), -1).bfloat16().cuda()
    norm = (torch.randn(batch, 1, width, generator=gen) * 3).bfloat16().cuda()
    rows_total = batch + 3
    k_cache = torch.randn(rows_total, kv, positions, dim, generator=gen).bfloat16().cuda()
    v_cache = torch.randn(rows_total, kv, positions, dim, generator=gen).bfloat16().cuda()
    if kind == "talker":
        rows = torch.randperm(rows_total, generator=gen)[:batch].cuda()
        pos = torch.randint(0, positions, (batch,), generator=gen).cuda()
        slots, lengths = rows, pos + 1
    else:
        rows = torch.arange(batch, device="cuda")
        pos, lengths = torch.tensor(9, device="cuda").expand(batch), torch.tensor(10, device="cuda").expand(batch)
        slots = rows
    args = (q, k, v, qw, kw, cos, sin, EPS)
    kc1, vc1, kc2, vc2 = k_cache.clone(), v_cache.clone(), k_cache.clone(), v_cache.clone()
    out, q_out = norm_rope_attend_triton(*args, kc1, vc1, rows, pos, slots, lengths, dim ** -0.5, norm, EPS,
                                         one_launch=True)
    want_q = qk_norm_rope_write_kv_triton(*args, kc2, vc2, rows, pos, norm, EPS)
    want = slot_decode_attention_triton(want_q[:, :, 0], kc2, vc2, slots, lengths, dim ** -0.5)
    torch.cuda.synchronize()
    assert torch.equal(q_out, want_q) and torch.equal(kc1, kc2) and torch.equal(vc1, vc2)
    torch.testing.assert_close(out.float(), want.float(), atol=1e-2, rtol=1e-2)
    assert (out == want).float().mean() > 0.95


# ---------------------------------------------------------------------------------------------
# Child process body


def _model_run() -> dict:
    """tests/test_qk_norm_rope_write_kv.py's 2-layer bf16 stack through the model's stores."""
    from test_qk_norm_rope_write_kv import _model_decode_run

    return _model_decode_run()


def _run_child(work_dir: Path) -> None:
    import os

    from kernels import norm_rope_attend_triton as nrt
    from kernels import qk_norm_rope as qkr
    from kernels import slot_attention as sla
    from kernels.qk_norm_rope_triton import qk_norm_rope_write_kv_triton
    from kernels.slot_attention_triton import is_interpreting, slot_decode_attention_triton

    # the pair's kernels run in the interpreter too (the model runs compare against them)
    os.environ[qkr.CPU_TRITON_ENV] = "1"
    os.environ[sla.CPU_TRITON_ENV] = "1"
    outputs = {}
    for name, c in _cases().items():
        outputs[f"fused/{name}"] = _run_fused(nrt.norm_rope_attend_triton, c)
        outputs[f"pair/{name}"] = _run_pair(qk_norm_rope_write_kv_triton, slot_decode_attention_triton, c)
        outputs[f"dispatch/{name}"] = _run_dispatch(c)

    calls = {"fused_calls": 0, "write_kv_calls": 0}
    nra._route.launcher = counting(nrt.norm_rope_attend_triton, calls, "fused_calls")
    qkr._write_kv_route.launcher = counting(qk_norm_rope_write_kv_triton, calls, "write_kv_calls")
    for label, env in (("fused", "1"), ("pair", "0")):
        os.environ[nra.ENV] = env
        calls.update(fused_calls=0, write_kv_calls=0)
        for key, value in _model_run().items():
            outputs[f"model_{label}/{key}"] = value
        outputs[f"model_info/{label}"] = dict(calls)
    save_child_results(work_dir, outputs, nra, is_interpreting())


if __name__ == "__main__":
    child_main(_run_child)
