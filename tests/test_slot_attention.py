"""Slot decode attention: Triton kernel (CPU interpreter) vs the eager reference, the reference vs
the decode path it replaced (gather + mask + layers.grouped_attention), the
qwen3tts::slot_decode_attention op, routing and fallbacks.

triton.jit picks the interpreter when the kernel module is imported, so every real kernel launch
happens in one child process started with TRITON_INTERPRET=1 and QWEN3_TTS_SLOTATTN_CPU_TRITON=1
(`python tests/test_slot_attention.py --child DIR`): the parent writes the inputs, the child only
runs the kernel and the dispatcher, and every comparison happens here in the parent.

Tolerances. fp32: atol = rtol = 1e-5 against the reference (measured <= 5e-7). bf16/fp16: against
the reference |out - ref| <= 2e-2 * max|ref| (both round their output once: measured 1 bf16 ulp);
and, tighter, against fp64 attention of the same inputs |out - truth| <= half an ulp * |truth| + 1e-5,
which holds for bf16 because under the interpreter the kernel computes in fp32 and rounds once (the
GPU's bf16 P.V dot adds a bf16 rounding of the probabilities, flash-attention style; not run here).
fp16 runs the native dots in the interpreter too, so its bound adds half an fp16 ulp of max|V|.
"""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

# triton_support first: it puts the repo root on sys.path for the kernels imports below
from triton_support import (CountingLauncher, OpCounter, assert_dispatch_equals_kernel,
                            check_failure_logged_once_and_remembered, check_import_failure_is_recorded,
                            check_real_launch_failure_falls_back, child_main, compile_for_hopper, equal_to,
                            forbid_triton, fresh_route, run_interpreter_child, save_child_results,
                            skip_if_interpreting, use_launcher)
from kernels import slot_attention
from kernels.slot_attention_reference import slot_decode_attention_reference as reference

OP_NAME = "qwen3tts.slot_decode_attention"
HALF_ULP = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}


def _inputs(batch, heads, kv, dim, positions, num_slots, slots, lengths, dtype, seed, strided_q=True):
    gen = torch.Generator().manual_seed(seed)
    k = torch.randn(num_slots, kv, positions, dim, generator=gen).to(dtype)
    v = torch.randn(num_slots, kv, positions, dim, generator=gen).to(dtype)
    if strided_q:  # q as a view of a fused qkv projection: row stride (H + 2 KV) * D, last dim contiguous
        qkv = torch.randn(batch, (heads + 2 * kv) * dim, generator=gen).to(dtype)
        q = qkv[:, : heads * dim].view(batch, heads, dim)
    else:
        q = torch.randn(batch, heads, dim, generator=gen).to(dtype)
    return {"q": q, "k": k, "v": v, "slots": torch.tensor(slots), "lengths": torch.tensor(lengths),
            "scale": 1.0 / math.sqrt(dim), "kwargs": {}}


def _today(q, cache, layer, slots, positions, context_len, new_k, new_v):
    """What the decode step computed before this kernel: write each row's new key/value at its
    position, gather every row's context bucket, mask keys past the row's position, grouped SDPA."""
    from talker_service.model.layers import grouped_attention

    k_layer, v_layer = cache.k[layer], cache.v[layer]
    k_layer[slots, :, positions] = new_k[:, :, 0]
    v_layer[slots, :, positions] = new_v[:, :, 0]
    k_ctx = k_layer[:, :, :context_len].index_select(0, slots)
    v_ctx = v_layer[:, :, :context_len].index_select(0, slots)
    mask = (torch.arange(context_len)[None, :] <= positions[:, None])[:, None, None, :]
    return grouped_attention(q[:, :, None], k_ctx, v_ctx, mask)[:, :, 0]


def _cache_parity(dtype, seed=11):
    """A tiny SlotKVCache holding old keys, one decode write, and today's attention output."""
    from talker_service.model.kv_cache import SlotKVCache

    heads, kv, dim, layer, context_len = 4, 2, 64, 1, 32
    gen = torch.Generator().manual_seed(seed)
    cache = SlotKVCache(num_layers=2, max_slots=6, num_kv_heads=kv, max_seq_len=40, head_dim=dim,
                        dtype=dtype, device="cpu")
    cache.k.copy_(torch.randn(cache.k.shape, generator=gen).to(dtype))
    cache.v.copy_(torch.randn(cache.v.shape, generator=gen).to(dtype))
    slots, positions = torch.tensor([4, 1, 3, 0]), torch.tensor([0, 22, 31, 15])
    new_k = torch.randn(4, kv, 1, dim, generator=gen).to(dtype)
    new_v = torch.randn(4, kv, 1, dim, generator=gen).to(dtype)
    q = torch.randn(4, heads, dim, generator=gen).to(dtype)
    today = _today(q, cache, layer, slots, positions, context_len, new_k, new_v)
    case = {"q": q, "k": cache.k[layer].clone(), "v": cache.v[layer].clone(), "slots": slots,
            "lengths": positions + 1, "scale": 1.0 / math.sqrt(dim), "kwargs": {}}
    return case, today, context_len


def _all_cases():
    cases = {}
    # lengths: 1, odd, exactly one tile (16), P (48, three tiles), odd; slots permuted, not contiguous
    small = dict(batch=5, heads=4, kv=2, dim=64, positions=48, num_slots=9, slots=[7, 2, 5, 0, 8],
                 lengths=[1, 17, 16, 48, 33])
    for dname, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16), ("fp16", torch.float16)):
        cases[f"{dname}-h4kv2d64-bn16"] = dict(_inputs(**small, dtype=dtype, seed=len(cases)), kwargs={"block_n": 16})
        if dtype != torch.float16:  # flash-decoding split; with length 1 two of three splits are empty
            cases[f"{dname}-h4kv2d64-bn16-split3"] = dict(cases[f"{dname}-h4kv2d64-bn16"],
                                                          kwargs={"block_n": 16, "num_splits": 3})
    # padding rows of a graph bucket all on one spare slot (8); default tiles (fp32: 32 positions):
    # a length of exactly one tile and P = 56 (a partial second tile)
    cases["fp32-padding-rows"] = _inputs(5, 4, 2, 64, 56, 9, [3, 1, 8, 8, 8], [56, 32, 1, 1, 1], torch.float32,
                                         seed=20, strided_q=False)
    cases["bf16-padding-rows-split2"] = dict(_inputs(5, 4, 2, 64, 56, 9, [3, 1, 8, 8, 8], [56, 32, 1, 1, 1],
                                                     torch.bfloat16, seed=21), kwargs={"num_splits": 2})
    # a group of 3 query heads (padded to 16 rows), head_dim 32, and 1 query head per kv head
    cases["fp32-h6kv2d32"] = _inputs(3, 6, 2, 32, 40, 4, [2, 0, 3], [40, 1, 19], torch.float32, seed=22)
    cases["bf16-h2kv2d16"] = _inputs(2, 2, 2, 16, 40, 3, [1, 2], [7, 40], torch.bfloat16, seed=23)
    # the talker's shape: B = 1, and B = 5 with lengths 1, one 64-tile, P = 70, odd
    cases["fp32-b1-h16kv8d128"] = _inputs(1, 16, 8, 128, 70, 3, [2], [70], torch.float32, seed=24)
    cases["bf16-b5-h16kv8d128-split2"] = dict(_inputs(5, 16, 8, 128, 70, 7, [4, 0, 2, 6, 1], [1, 64, 70, 37, 5],
                                                      torch.bfloat16, seed=25), kwargs={"num_splits": 2})
    for dname, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        cases[f"{dname}-cache-parity"] = _cache_parity(dtype)[0]
        cases[f"{dname}-frame-cache"] = _frame_cache_case(dtype, seed=26)
        # a 16-position cache is one tile (SINGLE_TILE): lengths 0 (zeros), partial, full, 1
        cases[f"{dname}-one-tile-lengths"] = _inputs(4, 4, 2, 64, 16, 5, [4, 1, 2, 0], [0, 3, 16, 1], dtype, seed=27)
    return cases


def _frame_cache_case(dtype, seed, offset=9):
    """The code predictor's one-query step (talker_service.model.kv_cache.FrameKVCache.attend): the
    cache has 16 positions, batch row b reads cache row b, and every row's length is one expanded
    scalar (stride 0), as the frame cache passes it; default tiles (16 positions: one 16-key tile)."""
    case = _inputs(4, 4, 2, 64, 16, 4, [0, 1, 2, 3], [1, 1, 1, 1], dtype, seed=seed)
    return dict(case, lengths=torch.tensor([offset + 1]).expand(4))


def _call(case, fn, **kwargs):
    return fn(case["q"], case["k"], case["v"], case["slots"], case["lengths"], case["scale"], **kwargs)


def _truth(case):
    c = dict(case, q=case["q"].double(), k=case["k"].double(), v=case["v"].double())
    return _call(c, reference)


def _assert_close_to(out, ref, case):
    assert out.shape == ref.shape and out.dtype == ref.dtype and out.is_contiguous()
    if out.dtype == torch.float32:
        torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
        return
    err = (out.float() - ref.float()).abs().max().item()
    assert err <= 2e-2 * ref.float().abs().max().item(), err
    truth = _truth(case)
    bound = HALF_ULP[out.dtype] * truth.abs() + 1e-5
    if out.dtype == torch.float16:  # native fp16 dots here too: probabilities rounded to fp16 for P.V
        bound = bound + HALF_ULP[torch.float16] * case["v"].abs().max().item()
    assert bool(((out.double() - truth).abs() <= bound).all()), "more than half an ulp off fp64 attention"


# ---------------------------------------------------------------------------------------------
# Kernel under the Triton interpreter (child process)


@pytest.fixture(scope="module")
def interpreted(tmp_path_factory):
    work_dir = tmp_path_factory.mktemp("slot_attention_interp")
    torch.save(_all_cases(), work_dir / "cases.pt")
    info = run_interpreter_child(__file__, work_dir, slot_attention.CPU_TRITON_ENV, timeout=300)
    return torch.load(work_dir / "cases.pt"), torch.load(work_dir / "outputs.pt"), info


@pytest.mark.parametrize("name", list(_all_cases()))
def test_kernel_matches_reference(interpreted, name):
    cases, outputs, info = interpreted
    assert info["is_interpreting"], "the child must run the Triton interpreter, not a GPU kernel"
    case = cases[name]
    _assert_close_to(outputs[f"kernel/{name}"], _call(case, reference), case)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_kernel_matches_todays_decode_path(interpreted, dtype):
    cases, outputs, _ = interpreted
    name = f"{'fp32' if dtype == torch.float32 else 'bf16'}-cache-parity"
    _, today, _ = _cache_parity(dtype)
    _assert_close_to(outputs[f"kernel/{name}"], today, cases[name])


def test_frame_cache_lengths_reach_the_kernel_as_one_expanded_scalar(interpreted):
    cases, outputs, _ = interpreted
    for name in ("fp32-frame-cache", "bf16-frame-cache"):
        assert cases[name]["lengths"].stride(0) == 0   # the kernel read lengths[0] for every row
        # rows of one length give the attention over keys 0..9 of each row
        case = cases[name]
        dense = dict(case, lengths=torch.full((4,), 10))
        _assert_close_to(outputs[f"kernel/{name}"], _call(dense, reference), case)


def test_frame_cache_one_query_step_equals_sdpa_over_its_keys():
    """FrameKVCache.attend's one-query path (the slot kernel's op, CPU reference route) gives what it
    replaced: grouped SDPA over the first offset + 1 cached positions, no mask."""
    from talker_service.model.kv_cache import FrameKVCache, causal_mask
    from talker_service.model.layers import grouped_attention

    gen = torch.Generator().manual_seed(3)
    cache = FrameKVCache(num_layers=2, batch_size=3, num_kv_heads=2, num_positions=16, head_dim=32,
                         dtype=torch.float32, device="cpu")
    cache.k.copy_(torch.randn(cache.k.shape, generator=gen))
    cache.v.copy_(torch.randn(cache.v.shape, generator=gen))
    q = torch.randn(3, 4, 1, 32, generator=gen)
    for offset in (2, 9, 15):
        cache.offset = offset
        want = grouped_attention(q, cache.k[1, :, :, :offset + 1], cache.v[1, :, :, :offset + 1], None)
        got = cache.attend(1, q, None)
        assert got.shape == want.shape == (3, 4, 1, 32)
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)
    # the two-query first step: query 0 is v0 itself (one key), query 1 a one-query step of length 2
    cache.offset = 0
    q2 = torch.randn(3, 4, 2, 32, generator=gen)
    want = grouped_attention(q2, cache.k[1, :, :, :2], cache.v[1, :, :, :2], causal_mask(0, 2, "cpu"))
    got = cache.attend(1, q2, None)
    assert got.shape == want.shape
    assert torch.equal(got[:, :, 0], cache.v[1, :, :, 0].repeat_interleave(2, dim=1))
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)
    # any other span falls back to SDPA with the causal mask built here; a mask is refused
    cache.offset = 4
    q3 = torch.randn(3, 4, 3, 32, generator=gen)
    want = grouped_attention(q3, cache.k[1, :, :, :7], cache.v[1, :, :, :7], causal_mask(4, 3, "cpu"))
    assert torch.equal(cache.attend(1, q3, None), want)
    with pytest.raises(ValueError, match="causal by position"):
        cache.attend(1, q3, causal_mask(4, 3, "cpu"))


def test_splits_agree_with_one_pass(interpreted):
    _, outputs, _ = interpreted
    one, split = outputs["kernel/fp32-h4kv2d64-bn16"], outputs["kernel/fp32-h4kv2d64-bn16-split3"]
    torch.testing.assert_close(split, one, atol=1e-6, rtol=1e-6)


def test_lengths_are_clamped_to_the_slot(interpreted):
    """Out-of-contract lengths never read outside the slot: > P acts as P, 0 gives zeros."""
    cases, outputs, _ = interpreted
    case = cases["fp32-h6kv2d32"]
    ref = _call(dict(case, lengths=torch.tensor([40, 1, 40])), reference)
    for key in ("clamp/one-pass", "clamp/split2"):
        out = outputs[key]
        torch.testing.assert_close(out[[0, 2]], ref[[0, 2]], atol=1e-5, rtol=1e-5)
        assert torch.equal(out[1], torch.zeros_like(out[1]))


@pytest.mark.parametrize("name", [n for n, c in _all_cases().items() if not c["kwargs"]])
def test_dispatcher_uses_triton_when_forced(interpreted, name):
    _, outputs, info = interpreted
    assert_dispatch_equals_kernel(info, outputs, name)


def test_op_is_one_dispatch_on_triton_path(interpreted):
    _, _, info = interpreted
    assert info["triton_path_op_counts"] == {OP_NAME: 1}


# ---------------------------------------------------------------------------------------------
# The reference is today's decode path


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_reference_equals_todays_decode_path(dtype):
    case, today, context_len = _cache_parity(dtype)
    # gathering the same context bucket: the same SDPA call, the same bits
    assert torch.equal(_call(case, reference, max_len=context_len), today)
    # default gather (the longest row on CPU) or the whole slot (P): extra keys are masked out
    tol = {"atol": 1e-6, "rtol": 1e-6} if dtype == torch.float32 else {"atol": 1e-2, "rtol": 1e-2}
    torch.testing.assert_close(_call(case, reference), today, **tol)
    torch.testing.assert_close(_call(case, reference, max_len=case["k"].shape[2]), today, **tol)


def test_reference_gqa_matches_repeated_heads():
    case = _inputs(3, 6, 2, 32, 40, 4, [2, 0, 3], [40, 1, 19], torch.float32, seed=30)
    k = case["k"][case["slots"]].repeat_interleave(3, dim=1)  # [B, H, P, D]: head h reads kv head h // 3
    v = case["v"][case["slots"]].repeat_interleave(3, dim=1)
    mask = (torch.arange(40)[None, :] < case["lengths"][:, None])[:, None, None, :]
    expected = torch.nn.functional.scaled_dot_product_attention(case["q"][:, :, None], k, v, attn_mask=mask)[:, :, 0]
    torch.testing.assert_close(_call(case, reference), expected, atol=1e-6, rtol=1e-6)


# ---------------------------------------------------------------------------------------------
# Op registration, counting, tracing (in-process; CPU default path = reference inside the op)


def _small(dtype=torch.bfloat16, seed=7, dim=64):
    return _inputs(3, 4, 2, dim, 24, 5, [4, 0, 2], [24, 1, 9], dtype, seed=seed)


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_op_counts_as_one_launch(device):
    case = {key: (val.to(device) if isinstance(val, torch.Tensor) else val) for key, val in _small().items()}
    with torch.no_grad(), OpCounter() as counter:
        out = _call(case, slot_attention.slot_decode_attention)
    assert dict(counter.counts) == {OP_NAME: 1}
    assert out.shape == (3, 4, 64) and out.dtype == torch.bfloat16 and out.device.type == device


def test_make_fx_sees_one_node():
    from torch.fx.experimental.proxy_tensor import make_fx

    case = _small()
    gm = make_fx(lambda q, k, v, s, n: slot_attention.slot_decode_attention(q, k, v, s, n, case["scale"]),
                 tracing_mode="fake")(case["q"], case["k"], case["v"], case["slots"], case["lengths"])
    calls = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert calls == [torch.ops.qwen3tts.slot_decode_attention.default], calls


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_opcheck(dtype):
    case = _small(dtype)
    torch.library.opcheck(torch.ops.qwen3tts.slot_decode_attention.default,
                          (case["q"], case["k"], case["v"], case["slots"], case["lengths"], case["scale"]))


# ---------------------------------------------------------------------------------------------
# Dispatcher routing and fallbacks (in-process, stand-in launchers)


@pytest.fixture
def fresh_dispatcher(monkeypatch):
    return fresh_route(monkeypatch, slot_attention)


def _stand_in():
    return CountingLauncher(lambda *args: reference(*args) + 1.0)  # distinguishable from eager


def test_cpu_default_uses_reference_without_touching_triton(fresh_dispatcher):
    forbid_triton(fresh_dispatcher, slot_attention)
    for dtype in (torch.float32, torch.bfloat16):
        case = _small(dtype)
        assert torch.equal(_call(case, slot_attention.slot_decode_attention), _call(case, reference))


def test_forced_cpu_path_calls_launcher(fresh_dispatcher):
    launcher = use_launcher(fresh_dispatcher, slot_attention, _stand_in())
    case = _small(torch.float32)
    assert torch.equal(_call(case, slot_attention.slot_decode_attention), _call(case, reference) + 1.0)
    # no kernel for fp64, head_dim 96 or 8, or an empty batch: eager, launcher untouched
    case64 = dict(case, q=case["q"].double(), k=case["k"].double(), v=case["v"].double())
    assert torch.equal(_call(case64, slot_attention.slot_decode_attention), _call(case64, reference))
    for dim in (96, 8):
        odd = _inputs(2, 4, 2, dim, 10, 3, [0, 2], [10, 3], torch.float32, seed=dim)
        assert torch.equal(_call(odd, slot_attention.slot_decode_attention), _call(odd, reference))
    empty = dict(case, q=case["q"][:0], slots=case["slots"][:0], lengths=case["lengths"][:0])
    assert _call(empty, slot_attention.slot_decode_attention).shape == (0, 4, 64)
    assert launcher.num_calls == 1


def test_grad_path_uses_reference_and_backprops(fresh_dispatcher):
    launcher = use_launcher(fresh_dispatcher, slot_attention, _stand_in())
    case = _small(torch.float32)
    q = case["q"].clone().requires_grad_(True)
    out = _call(dict(case, q=q), slot_attention.slot_decode_attention)
    assert launcher.num_calls == 0 and out.requires_grad
    out.sum().backward()
    assert q.grad is not None and q.grad.shape == q.shape
    with torch.no_grad():
        _call(dict(case, q=q), slot_attention.slot_decode_attention)
    assert launcher.num_calls == 1, "without grad mode the kernel must be used"


def test_failure_is_logged_once_and_remembered(fresh_dispatcher, caplog):
    case = _small()
    check_failure_logged_once_and_remembered(fresh_dispatcher, caplog, slot_attention,
                                             lambda: _call(case, slot_attention.slot_decode_attention),
                                             equal_to(_call(case, reference)))


def test_import_failure_is_recorded(fresh_dispatcher, caplog):
    case = _small(torch.float32)
    check_import_failure_is_recorded(fresh_dispatcher, caplog, slot_attention,
                                     lambda: _call(case, slot_attention.slot_decode_attention),
                                     equal_to(_call(case, reference)))


def test_real_launch_failure_falls_back(fresh_dispatcher):
    from kernels import slot_attention_triton

    case = _small()
    check_real_launch_failure_falls_back(fresh_dispatcher, slot_attention, slot_attention_triton,
                                         lambda: _call(case, slot_attention.slot_decode_attention),
                                         equal_to(_call(case, reference)))


@pytest.mark.parametrize("change, match", [
    (lambda c: dict(c, q=c["q"][:, :, :32]), r"head_dim"),
    (lambda c: dict(c, q=c["q"][:, :3]), r"multiple of KV"),
    (lambda c: dict(c, q=c["q"][:, 0]), r"q \[B, H, D\]"),
    (lambda c: dict(c, v=c["v"][:, :, :10]), r"of one shape"),
    (lambda c: dict(c, slots=c["slots"][:2]), r"slots and lengths \[3\]"),
    (lambda c: dict(c, k=c["k"].float()), r"share a dtype"),
    (lambda c: dict(c, lengths=c["lengths"].float()), r"int64/int32"),
    (lambda c: dict(c, slots=c["slots"].to("meta")), r"slots is on meta"),
])
def test_bad_arguments_raise_value_error(fresh_dispatcher, change, match):
    with pytest.raises(ValueError, match=match):
        _call(change(_small()), slot_attention.slot_decode_attention)
    assert slot_attention.triton_failure() is None, "bad input must not disable the kernel"


def test_choose_num_splits():
    from kernels.slot_attention_triton import choose_num_splits

    assert choose_num_splits(256, 8, 4096, 132) == 1  # 2048 programs: no split
    assert choose_num_splits(33, 8, 4096, 132) == 1
    assert choose_num_splits(16, 8, 4096, 132) == 3  # 128 programs -> 384
    assert choose_num_splits(1, 8, 4096, 132) == 16  # capped
    assert choose_num_splits(1, 8, 1024, 132) == 4  # >= 256 positions per split
    assert choose_num_splits(1, 8, 300, 132) == 1


def test_choose_short_cache():
    """The code predictor's one-tile cache: 2 pipeline stages always; 1 warp from 512 programs (H100,
    batch 256: 6.9 against 7.8 us on 2), 2 below (batch 1: 2.6 against 3.2 us on 1; 64: 3.6 either way)."""
    from kernels.slot_attention_triton import choose_short_cache

    assert choose_short_cache(256, 8) == (1, 2)
    assert choose_short_cache(64, 8) == (1, 2)
    assert choose_short_cache(63, 8) == (2, 2)
    assert choose_short_cache(1, 8) == (2, 2)


def _compile_for_hopper(kernel, signature, constants, num_warps):
    """Pointers and strides marked 16-divisible, as the JIT specializes them at run time."""
    pointers = [i for i, (name, ty) in enumerate(signature.items()) if ty.startswith("*") or name.startswith("stride")]
    return compile_for_hopper(kernel, signature, constants, pointers, num_warps=num_warps)


@pytest.mark.parametrize("dtype, splits", [("bf16", 1), ("bf16", 4), ("fp32", 1)])
def test_kernel_compiles_for_hopper(dtype, splits, monkeypatch):
    """Ahead-of-time compile of the GPU variant (native bf16 dots, not run by the interpreter) to an
    sm_90 cubin for the talker's shape: tensor-core MMAs and pipelined async K/V loads."""
    from kernels import slot_attention_triton as sat

    skip_if_interpreting(sat)
    # the current default, set to silence Triton 3.9's default-change warning
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "1")
    signature = {"q_ptr": f"*{dtype}", "k_ptr": f"*{dtype}", "v_ptr": f"*{dtype}", "slots_ptr": "*i64",
                 "lengths_ptr": "*i64", "out_ptr": f"*{dtype}", "part_acc_ptr": "*fp32", "part_m_ptr": "*fp32",
                 "part_l_ptr": "*fp32", "qk_scale": "fp32", "num_positions": "i32"}
    signature.update({name: "i32" for name in ("stride_qb", "stride_qh", "stride_ks", "stride_kh", "stride_kp",
                                               "stride_vs", "stride_vh", "stride_vp", "stride_slot",
                                               "stride_len")})
    block_n, num_warps = sat.choose_block(128, torch.float32 if dtype == "fp32" else torch.bfloat16)
    constants = {"GROUP": 2, "HEAD_DIM": 128, "BLOCK_H": 16, "BLOCK_N": block_n, "NUM_SPLITS": splits,
                 "DOT_FP32": dtype == "fp32", "SINGLE_TILE": False}
    signature.update({name: "constexpr" for name in constants})
    kernel = _compile_for_hopper(sat._slot_decode_attn_kernel, signature, constants, num_warps)
    ptx = kernel.asm["ptx"]
    assert "cp.async" in ptx
    if dtype == "bf16":
        assert "mma.sync.aligned" in ptx and ".bf16" in ptx
    if splits > 1:
        merge_sig = {"part_acc_ptr": "*fp32", "part_m_ptr": "*fp32", "part_l_ptr": "*fp32", "out_ptr": f"*{dtype}",
                     "HEAD_DIM": "constexpr", "NUM_SPLITS": "constexpr", "SPLITS_PAD": "constexpr"}
        _compile_for_hopper(sat._merge_splits_kernel, merge_sig,  # asserts a cubin came out
                            {"HEAD_DIM": 128, "NUM_SPLITS": splits, "SPLITS_PAD": splits}, 2)


# ---------------------------------------------------------------------------------------------
# Child process body


def _run_child(work_dir: Path) -> None:
    from kernels.slot_attention_triton import is_interpreting, slot_decode_attention_triton

    cases = torch.load(work_dir / "cases.pt")
    outputs = {}
    for name, case in cases.items():
        outputs[f"kernel/{name}"] = _call(case, slot_decode_attention_triton, **case["kwargs"])
        if not case["kwargs"]:
            outputs[f"dispatch/{name}"] = _call(case, slot_attention.slot_decode_attention)
    clamp = dict(cases["fp32-h6kv2d32"], lengths=torch.tensor([45, 0, 1000]))
    outputs["clamp/one-pass"] = _call(clamp, slot_decode_attention_triton)
    outputs["clamp/split2"] = _call(clamp, slot_decode_attention_triton, num_splits=2)
    with torch.no_grad(), OpCounter() as counter:
        _call(cases["bf16-h2kv2d16"], slot_attention.slot_decode_attention)
    save_child_results(work_dir, outputs, slot_attention, is_interpreting(), counter)


if __name__ == "__main__":
    child_main(_run_child)
