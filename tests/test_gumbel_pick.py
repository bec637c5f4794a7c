"""Seeded Gumbel-max pick: reference vs choose_tokens_keyed, Triton kernel (CPU interpreter) vs the
reference, the qwen3tts::gumbel_pick op and its routing.

triton.jit picks the interpreter when a kernel module is imported, so every interpreted launch
happens in one child process started with TRITON_INTERPRET=1 and QWEN3_TTS_GUMBEL_CPU_TRITON=1
(`python tests/test_gumbel_pick.py --child DIR`): the parent writes the inputs, the child only runs
kernels and the dispatcher, and every comparison happens here in the parent. The dispatcher's
fallbacks and the op registration are tested in-process with stand-in launchers. Tests marked for
CUDA (bit-exact noise on the GPU, CUDA-graph capture) skip on machines without one.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

# triton_support first: it puts the repo root on sys.path for the kernels imports below
from triton_support import (CountingLauncher, OpCounter, assert_dispatch_equals_kernel,
                            check_failure_logged_once_and_remembered, check_import_failure_is_recorded,
                            check_real_launch_failure_falls_back, child_main, compile_for_hopper, equal_to,
                            forbid_triton, fresh_route, run_interpreter_child, save_child_results,
                            skip_if_interpreting, use_launcher)

# In the child TRITON_INTERPRET=1 is already in the environment, so these jit functions interpret.
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from kernels import gumbel_pick  # noqa: E402
from kernels import gumbel_pick_triton as gpt  # noqa: E402
from kernels.gumbel_pick_reference import gumbel_pick_reference  # noqa: E402
from kernels.gumbel_pick_triton import _gumbel_from_bits, _mix32, _token_part  # noqa: E402
from kernels import hash_noise as noise  # noqa: E402
from talker_service.model.sampling import RowSampling, _candidates, choose_tokens_keyed  # noqa: E402
from sampling_cases import TABLE_SIZE, codebook0_logits, seeds_steps as _seeds_steps, token_table as _table  # noqa: E402

OP_NAME = "qwen3tts.gumbel_pick"
NUM_UNIFORMS = 1 << 23  # every uniform the noise can take: u = (k + 0.5) * 2**-23
NUM_HASH_PAIRS = 1 << 18


# ---------------------------------------------------------------------------------------------
# Inputs


def _rows(bs, gen, top_ks, top_ps, temps):
    pick = lambda options: torch.tensor(options)[torch.randint(0, len(options), (bs,), generator=gen)]  # noqa: E731
    return RowSampling(temperature=pick(temps).float(), top_k=pick(top_ks).long(), top_p=pick(top_ps).float(),
                       do_sample=torch.ones(bs, dtype=torch.bool))


def _perm_ids(bs, k, vocab, gen):
    return torch.stack([torch.randperm(vocab, generator=gen)[:k] for _ in range(bs)])


def _cases():
    """name -> (values [bs, K] fp32, token_ids [bs, K] int64, keys [bs] int64), fixed seeds."""
    gen = torch.Generator().manual_seed(1234)
    cases = {}
    # code predictor, candidate mode: top-k 64 of 2048, keys a strided column of group_keys
    rows = _rows(160, gen, [1, 5, 20, 50, 64], [1.0, 0.95, 0.8, 0.3], [0.5, 0.9, 1.3])
    seeds, steps = _seeds_steps(160, gen)
    gkeys = noise.group_keys(seeds, steps, 1, 15)
    values, ids = _candidates(torch.randn(160, 2048, generator=gen) * 3.0, rows, 64)
    cases["cand64"] = (values, ids, gkeys[:, 6])
    # full sort over 2048 (residual groups without candidate_k): mostly -inf rows
    rows = _rows(40, gen, [0, 1, 50, 200], [1.0, 0.9, 0.5], [0.7, 1.0])
    seeds, steps = _seeds_steps(40, gen)
    values, ids = _candidates(torch.randn(40, 2048, generator=gen) * 2.0, rows, None)
    cases["full2048"] = (values, ids, noise.group_keys(seeds, steps, 1, 15)[:, 14])
    # codebook 0: penalties, EOS/suppressed masks, full sort over 3072
    bs = 40
    logits = codebook0_logits(bs, gen)
    rows = _rows(bs, gen, [0, 50], [1.0, 0.9, 0.6], [0.9, 1.0])
    seeds, steps = _seeds_steps(bs, gen)
    values, ids = _candidates(logits, rows, None)
    cases["c0_full3072"] = (values, ids, noise.row_keys(seeds, steps, 0))
    # exact score ties: at 2**22..2**24 an fp32 ulp is 0.5..2, so value + gumbel collapses onto a
    # coarse grid and several candidates share the maximum; the first of them must win
    bs = 48
    values = torch.tensor([2.0**22, 2.0**23, 2.0**24])[torch.arange(bs) % 3, None].expand(bs, 64).clone()
    values[bs // 2:, 32:] = float("-inf")
    cases["ties_large"] = (values, _perm_ids(bs, 64, 2048, gen), noise.row_keys(*_seeds_steps(bs, gen), 3))
    # special rows: all -inf (torch picks index 0), one finite value last, NaN (counts as the max,
    # first NaN wins), +inf, two equal finite values among -inf
    special = torch.full((6, 64), float("-inf"))
    special[1, 63] = 0.5
    special[2] = torch.randn(64, generator=gen)
    special[2, [7, 20]] = float("nan")
    special[3] = torch.randn(64, generator=gen)
    special[3, [3, 40]] = float("inf")
    special[4, [10, 50]] = 1.0
    special[5] = torch.randn(64, generator=gen)
    cases["special"] = (special, _perm_ids(6, 64, 2048, gen), noise.row_keys(*_seeds_steps(6, gen), 9))
    # other K: 1, non powers of two, the largest supported
    for k, bs in ((1, 3), (5, 4), (100, 6), (4096, 4)):
        values = torch.randn(bs, k, generator=gen)
        values[0, k // 2:] = float("-inf")
        cases[f"k{k}"] = (values, _perm_ids(bs, k, 4096, gen), noise.row_keys(*_seeds_steps(bs, gen), 1))
    # row stride larger than K (column slices of wider tensors)
    wide_v, wide_ids = torch.randn(8, 80, generator=gen), _perm_ids(8, 80, 2048, gen)
    cases["row_strided"] = (wide_v[:, 8:72], wide_ids[:, 8:72], noise.row_keys(*_seeds_steps(8, gen), 2))
    return cases


def _hash_pairs():
    gen = torch.Generator().manual_seed(99)
    keys = torch.randint(0, 2**32, (NUM_HASH_PAIRS,), generator=gen)
    tokens = torch.randint(0, TABLE_SIZE, (NUM_HASH_PAIRS,), generator=gen)
    tokens[:TABLE_SIZE] = torch.arange(TABLE_SIZE)
    keys[:4] = torch.tensor([0, 1, 2**31, 2**32 - 1])
    return keys, tokens


def _torch_noise_table(device="cpu"):
    k = torch.arange(NUM_UNIFORMS, device=device)
    return -torch.log(-torch.log((k.to(torch.float32) + 0.5) * (1.0 / NUM_UNIFORMS)))


# ---------------------------------------------------------------------------------------------
# Test-only kernels built from the production kernel's jit helpers


@triton.jit
def _noise_table_kernel(out_ptr, n, BLOCK: tl.constexpr):
    """out[k] = the kernel's Gumbel noise for hash bits k << 9, i.e. for uniform (k + 0.5) * 2**-23."""
    k = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + k, _gumbel_from_bits(k.to(tl.uint32) << 9), mask=k < n)


@triton.jit
def _hash_bits_kernel(keys_ptr, tokens_ptr, hashes_ptr, out_ptr, n, HAS_HASHES: tl.constexpr, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = i < n
    key = tl.load(keys_ptr + i, mask=ok, other=0).to(tl.uint32)
    token = tl.load(tokens_ptr + i, mask=ok, other=0)
    if HAS_HASHES:
        part = tl.load(hashes_ptr + token, mask=ok, other=0).to(tl.uint32)
    else:
        part = _token_part(token)
    tl.store(out_ptr + i, _mix32(key ^ part).to(tl.int64), mask=ok)


def _noise_table_triton(device):
    out = torch.empty(NUM_UNIFORMS, dtype=torch.float32, device=device)
    _noise_table_kernel[(NUM_UNIFORMS // 65536,)](out, NUM_UNIFORMS, BLOCK=65536, enable_fp_fusion=False)
    return out


def _hash_bits_triton(keys, tokens, hashes):
    out = torch.empty_like(keys)
    block = 65536 if keys.device.type == "cpu" else 1024
    _hash_bits_kernel[(triton.cdiv(keys.numel(), block),)](
        keys, tokens, tokens if hashes is None else hashes, out, keys.numel(),
        HAS_HASHES=hashes is not None, BLOCK=block)
    return out & 0xFFFFFFFF


# ---------------------------------------------------------------------------------------------
# The reference is the current choose_tokens_keyed tail


@pytest.mark.parametrize("candidate_k", [None, 64])
@pytest.mark.parametrize("with_table", [False, True])
def test_reference_equals_choose_tokens_keyed(candidate_k, with_table):
    gen = torch.Generator().manual_seed(5)
    bs = 24
    logits = torch.randn(bs, 2048, generator=gen) * 3.0
    rows = _rows(bs, gen, [1, 10, 50, 64], [1.0, 0.9, 0.5], [0.6, 1.0])
    keys = noise.group_keys(*_seeds_steps(bs, gen), 1, 15)[:, 4]
    table = noise.token_hashes(2048, "cpu") if with_table else None
    values, ids = _candidates(logits, rows, candidate_k)
    picked = gumbel_pick_reference(values, ids, keys, table)
    assert picked.dtype == torch.int64 and picked.shape == (bs,)
    assert torch.equal(picked, choose_tokens_keyed(logits, rows, keys, candidate_k, table))
    assert torch.equal(picked, gumbel_pick_reference(values, ids, keys))  # the table changes nothing


def test_kernel_constants_are_noise_py_constants():
    assert (gpt.TOKEN_SALT, gpt.MUL_A, gpt.MUL_B) == (noise._TOKEN_SALT, noise._MUL_A, noise._MUL_B)
    assert gpt.UNIFORM_SHIFT == 32 - noise._UNIFORM_BITS and gpt.MAX_K == gumbel_pick.MAX_K


def test_tie_cases_really_tie():
    """The tie and special cases exercise first-maximum selection (else they would prove nothing)."""
    cases = _cases()
    values, ids, keys = cases["ties_large"]
    scores = values + noise.gumbel_for_tokens(keys, ids)
    num_max = (scores == scores.max(-1, keepdim=True).values).sum(-1)
    assert int((num_max > 1).sum()) >= 12, num_max  # 18 of 48 rows with these seeds
    values, ids, keys = cases["special"]
    picked = gumbel_pick_reference(values, ids, keys)
    assert picked[0] == ids[0, 0] and picked[1] == ids[1, 63] and picked[2] == ids[2, 7]
    assert picked[3] == ids[3, 3] and picked[4] in (ids[4, 10], ids[4, 50])


# ---------------------------------------------------------------------------------------------
# Kernel under the Triton interpreter (child process)


@pytest.fixture(scope="module")
def interpreted(tmp_path_factory):
    work_dir = tmp_path_factory.mktemp("gumbel_interp")
    torch.save(_cases(), work_dir / "cases.pt")
    info = run_interpreter_child(__file__, work_dir, gumbel_pick.CPU_TRITON_ENV, timeout=180)
    return torch.load(work_dir / "cases.pt"), torch.load(work_dir / "outputs.pt"), info


@pytest.mark.parametrize("name", list(_cases()))
def test_kernel_matches_reference(interpreted, name):
    cases, outputs, info = interpreted
    assert info["is_interpreting"], "the child must run the Triton interpreter, not a GPU kernel"
    values, ids, keys = cases[name]
    ref = gumbel_pick_reference(values, ids, keys)
    assert torch.equal(ref, gumbel_pick_reference(values, ids, keys, _table()))
    for key in (f"kernel/{name}", f"kernel_table/{name}"):
        out = outputs[key]
        assert out.dtype == torch.int64 and out.shape == ref.shape
        assert torch.equal(out, ref), f"{key}: rows {(out != ref).nonzero().flatten().tolist()} differ"


def test_dispatcher_uses_triton_when_forced(interpreted):
    cases, outputs, info = interpreted
    assert_dispatch_equals_kernel(info, outputs, cases)


def test_op_is_one_dispatch_on_triton_path(interpreted):
    _, _, info = interpreted
    assert info["triton_path_op_counts"] == {OP_NAME: 1}


def test_hash_bits_are_exact(interpreted):
    """uint32 wrap-around lanes give noise.py's int64-and-mask bits, hashed ids and table alike."""
    _, outputs, _ = interpreted
    keys, tokens = _hash_pairs()
    expected = noise.mix32(keys ^ noise.mix32((tokens + noise._TOKEN_SALT) & noise._MASK32))
    assert torch.equal(outputs["bits/hashed"], expected)
    assert torch.equal(outputs["bits/table"], expected)


def test_interpreter_noise_differs_from_torch_only_by_the_log_library(interpreted):
    """All 2**23 noise values: the interpreter's tl.log is numpy's log, which rounds differently from
    torch's CPU log on ~32% of them (by <= 1e-6 absolute); the kernel's own arithmetic adds nothing
    (it equals the formula with numpy's log bit for bit). Both tables are strictly increasing in u, so
    only near-ties of value + noise can pick differently: 0 of 3.9M emulated draws did (K = 64, 2048,
    3072, flat and tied rows); here 2**15 rows of K = 64."""
    _, outputs, _ = interpreted
    interp = outputs["noise_table"]
    u = ((np.arange(NUM_UNIFORMS, dtype=np.float32) + np.float32(0.5)) * np.float32(1.0 / NUM_UNIFORMS))
    with np.errstate(all="ignore"):
        assert torch.equal(interp, torch.from_numpy(-np.log(-np.log(u))))
    ref = _torch_noise_table()
    assert bool((interp[1:] > interp[:-1]).all()) and bool((ref[1:] > ref[:-1]).all())
    assert float((interp - ref).abs().max()) <= 2e-6
    differ = int((interp != ref).sum())
    assert differ < NUM_UNIFORMS // 2, differ  # numpy's log is not torch's: measured 2,722,198

    gen = torch.Generator().manual_seed(77)
    values, ids = _candidates(torch.randn(1 << 15, 512, generator=gen) * 3.0,
                              _rows(1 << 15, gen, [50], [1.0, 0.9], [0.9]), 64)
    keys = torch.randint(0, 2**32, (1 << 15,), generator=gen)
    bits = noise.mix32(keys[:, None] ^ noise.mix32((ids + noise._TOKEN_SALT) & noise._MASK32))
    pick_ref = (values + ref[bits >> 9]).argmax(-1)
    assert torch.equal(pick_ref, (values + noise.gumbel_for_tokens(keys, ids)).argmax(-1))
    assert torch.equal(pick_ref, (values + interp[bits >> 9]).argmax(-1))


# ---------------------------------------------------------------------------------------------
# Op registration, counting, tracing (in-process; CPU default path = reference inside the op)


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("with_table", [False, True])
def test_op_counts_as_one_launch(device, with_table):
    values, ids, keys = (t.to(device) for t in _cases()["cand64"])
    table = _table().to(device) if with_table else None
    with torch.no_grad(), OpCounter() as counter:
        out = gumbel_pick.gumbel_pick(values, ids, keys, table)
    assert dict(counter.counts) == {OP_NAME: 1}
    assert out.shape == (values.shape[0],) and out.dtype == torch.int64 and out.device.type == device
    with torch.no_grad(), OpCounter() as eager:
        gumbel_pick_reference(values, ids, keys, table)
    assert sum(eager.counts.values()) >= 20, eager.counts  # what the op replaces


def test_make_fx_sees_one_node():
    from torch.fx.experimental.proxy_tensor import make_fx

    values, ids, keys = _cases()["k100"]
    gm = make_fx(gumbel_pick.gumbel_pick, tracing_mode="fake")(values, ids, keys, _table())
    calls = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert calls == [torch.ops.qwen3tts.gumbel_pick.default], calls


@pytest.mark.parametrize("with_table", [False, True])
def test_opcheck(with_table):
    values, ids, keys = _cases()["k5"]
    torch.library.opcheck(torch.ops.qwen3tts.gumbel_pick.default,
                          (values, ids, keys.contiguous(), _table() if with_table else None))


# ---------------------------------------------------------------------------------------------
# Dispatcher routing and fallbacks (in-process, stand-in launchers)


@pytest.fixture
def fresh_dispatcher(monkeypatch):
    return fresh_route(monkeypatch, gumbel_pick)


def _stand_in():
    return CountingLauncher(lambda *args: gumbel_pick_reference(*args) + 100_000)  # distinguishable


def _small_case():
    values, ids, keys = _cases()["k100"]
    return values, ids, keys


def test_cpu_default_uses_reference_without_touching_triton(fresh_dispatcher):
    forbid_triton(fresh_dispatcher, gumbel_pick)
    values, ids, keys = _small_case()
    for table in (None, _table()):
        assert torch.equal(gumbel_pick.gumbel_pick(values, ids, keys, table), gumbel_pick_reference(values, ids, keys))


def test_forced_cpu_path_calls_launcher(fresh_dispatcher):
    launcher = use_launcher(fresh_dispatcher, gumbel_pick, _stand_in())
    values, ids, keys = _small_case()
    ref = gumbel_pick_reference(values, ids, keys)
    assert torch.equal(gumbel_pick.gumbel_pick(values, ids, keys, _table()), ref + 100_000)
    # K past 4096 or no rows: eager, launcher untouched
    gen = torch.Generator().manual_seed(3)
    big_v, big_ids = torch.randn(2, 4097, generator=gen), _perm_ids(2, 4097, 5000, gen)
    big_keys = torch.randint(0, 2**32, (2,), generator=gen)
    big_ref = gumbel_pick_reference(big_v, big_ids, big_keys)
    assert torch.equal(gumbel_pick.gumbel_pick(big_v, big_ids, big_keys), big_ref)
    empty = gumbel_pick.gumbel_pick(values[:0], ids[:0], keys[:0])
    assert empty.shape == (0,) and empty.dtype == torch.int64
    assert launcher.num_calls == 1
    # values that require grad are detached (an index has no gradient), still one kernel call
    assert torch.equal(gumbel_pick.gumbel_pick(values.clone().requires_grad_(True), ids, keys), ref + 100_000)
    assert launcher.num_calls == 2


def test_failure_is_logged_once_and_remembered(fresh_dispatcher, caplog):
    values, ids, keys = _small_case()
    check_failure_logged_once_and_remembered(fresh_dispatcher, caplog, gumbel_pick,
                                             lambda: gumbel_pick.gumbel_pick(values, ids, keys),
                                             equal_to(gumbel_pick_reference(values, ids, keys)))


def test_import_failure_is_recorded(fresh_dispatcher, caplog):
    values, ids, keys = _small_case()
    check_import_failure_is_recorded(fresh_dispatcher, caplog, gumbel_pick,
                                     lambda: gumbel_pick.gumbel_pick(values, ids, keys),
                                     equal_to(gumbel_pick_reference(values, ids, keys)))


def test_real_launch_failure_falls_back(fresh_dispatcher):
    values, ids, keys = _small_case()
    check_real_launch_failure_falls_back(fresh_dispatcher, gumbel_pick, gpt, lambda: gumbel_pick.gumbel_pick(values, ids, keys),
                                         equal_to(gumbel_pick_reference(values, ids, keys)))


@pytest.mark.parametrize("mutate, match", [
    (lambda v, i, k, h: (v[0], i[0], k, h), r"\[bs, K\]"),
    (lambda v, i, k, h: (v, i[:, :-1], k, h), r"\[bs, K\]"),
    (lambda v, i, k, h: (v, i, k[:-1], h), r"keys \[bs\]"),
    (lambda v, i, k, h: (v.double(), i, k, h), r"float32 values"),
    (lambda v, i, k, h: (v, i.int(), k, h), r"int64 token_ids"),
    (lambda v, i, k, h: (v, i, k, h.int()), r"hashes table"),
    (lambda v, i, k, h: (v, i, k, h.to("meta")), r"hashes is on meta"),
])
def test_bad_arguments_raise_value_error(fresh_dispatcher, mutate, match):
    values, ids, keys = _small_case()
    with pytest.raises(ValueError, match=match):
        gumbel_pick.gumbel_pick(*mutate(values, ids, keys, _table()))
    assert gumbel_pick.triton_failure() is None, "bad input must not disable the kernel"


def test_choose_block():
    assert gpt.choose_block(1) == (16, 1)
    assert gpt.choose_block(64) == (64, 1)
    assert gpt.choose_block(2048) == (2048, 8)
    assert gpt.choose_block(3072) == (4096, 8)


def test_kernel_compiles_for_hopper():
    """Ahead-of-time compile to an sm_90 cubin (no GPU needed): 32-bit wrap-around multiplies, logical
    shifts, an unsigned int -> float convert, and tl.log lowered to libdevice's __nv_logf (the function
    behind CUDA's logf, which torch.log calls for fp32 on the GPU), not lg2.approx."""
    skip_if_interpreting(gpt)
    signature = {"values_ptr": "*fp32", "tokens_ptr": "*i64", "keys_ptr": "*i64", "hashes_ptr": "*i64",
                 "out_ptr": "*i64", "num_cols": "i32", "values_row_stride": "i32", "tokens_row_stride": "i32",
                 "keys_stride": "i32", "HAS_HASHES": "constexpr", "BLOCK_K": "constexpr"}
    kernel = compile_for_hopper(gpt._gumbel_pick_kernel, signature, {"HAS_HASHES": False, "BLOCK_K": 2048},
                                num_warps=8, enable_fp_fusion=False)
    ptx = kernel.asm["ptx"]
    assert "__nv_logf" in ptx and "lg2.approx" not in ptx
    for op in ("mul.lo.s32", "shr.u32", "cvt.rn.f32.u32"):
        assert op in ptx, op


# ---------------------------------------------------------------------------------------------
# CUDA (skipped without a GPU): bit-exact noise, kernel == reference, graph capture

cuda_only = pytest.mark.skipif(not torch.cuda.is_available() or gpt.is_interpreting(), reason="needs a CUDA GPU")


@cuda_only
def test_cuda_noise_table_equals_torch_log():
    """Every one of the 2**23 noise values: the kernel's tl.log == torch.log on CUDA, bit for bit."""
    ours, ref = _noise_table_triton("cuda"), _torch_noise_table("cuda")
    assert torch.equal(ours, ref), f"{int((ours != ref).sum())} of {NUM_UNIFORMS} noise values differ"
    keys, tokens = (t.cuda() for t in _hash_pairs())
    expected = noise.mix32(keys ^ noise.mix32((tokens + noise._TOKEN_SALT) & noise._MASK32))
    assert torch.equal(_hash_bits_triton(keys, tokens, None), expected)
    assert torch.equal(_hash_bits_triton(keys, tokens, _table().cuda()), expected)


@cuda_only
def test_cuda_kernel_matches_reference():
    table = _table().cuda()
    for name, case in _cases().items():
        values, ids, keys = (t.cuda() for t in case)
        ref = gumbel_pick_reference(values, ids, keys)
        assert torch.equal(gpt.gumbel_pick_triton(values, ids, keys), ref), name
        assert torch.equal(gpt.gumbel_pick_triton(values, ids, keys, table), ref), name
        assert torch.equal(gumbel_pick.gumbel_pick(values, ids, keys, table), ref), name
    assert gumbel_pick.triton_failure() is None


@cuda_only
def test_cuda_graph_capture_and_replay():
    cases = _cases()
    values, ids, keys = (t.cuda().contiguous() for t in cases["cand64"])
    table = _table().cuda()
    gumbel_pick.gumbel_pick(values, ids, keys, table)  # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = gumbel_pick.gumbel_pick(values, ids, keys, table)
    gen = torch.Generator().manual_seed(8)
    for _ in range(3):
        values.copy_(torch.randn(values.shape, generator=gen))
        keys.copy_(torch.randint(0, 2**32, keys.shape, generator=gen))
        graph.replay()
        assert torch.equal(out, gumbel_pick_reference(values, ids, keys))


# ---------------------------------------------------------------------------------------------
# Child process body


def _run_child(work_dir: Path) -> None:
    torch.set_num_threads(1)  # as tests/conftest.py does for the parent: the 2-core CI runs both at once
    cases = torch.load(work_dir / "cases.pt")
    table = _table()
    outputs = {}
    for name, (values, ids, keys) in cases.items():
        outputs[f"kernel/{name}"] = gpt.gumbel_pick_triton(values, ids, keys)
        outputs[f"kernel_table/{name}"] = gpt.gumbel_pick_triton(values, ids, keys, table)
        outputs[f"dispatch/{name}"] = gumbel_pick.gumbel_pick(values, ids, keys)
    keys, tokens = _hash_pairs()
    outputs["bits/hashed"] = _hash_bits_triton(keys, tokens, None)
    outputs["bits/table"] = _hash_bits_triton(keys, tokens, table)
    outputs["noise_table"] = _noise_table_triton("cpu")
    values, ids, keys = cases["k5"]
    with torch.no_grad(), OpCounter() as counter:
        gumbel_pick.gumbel_pick(values, ids, keys, table)
    save_child_results(work_dir, outputs, gumbel_pick, gpt.is_interpreting(), counter)


if __name__ == "__main__":
    child_main(_run_child)
