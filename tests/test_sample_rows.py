"""Whole-row sampling in one launch (kernels/sample_rows*.py): the Triton kernel under the interpreter
against the stable-sort reference (bit for bit on random, tied, bf16 and codebook-0 rows; flat rows
only at a top-p near-tie), choose_tokens_keyed taking it on the Triton path, the
qwen3tts::sample_rows op and its routing, the sm_90 compile, and (CUDA only) the GPU kernel.

As in tests/test_warp_pick.py, every interpreted launch happens in one child process started with
TRITON_INTERPRET=1 and QWEN3_TTS_SAMPLEROWS_CPU_TRITON=1 (`python tests/test_sample_rows.py --child DIR`).
"""
from __future__ import annotations

import pytest
import torch

# triton_support first: it puts the repo root on sys.path for the kernels imports below
from triton_support import (CountingLauncher, OpCounter, assert_dispatch_equals_kernel,
                            check_failure_logged_once_and_remembered, check_import_failure_is_recorded,
                            check_real_launch_failure_falls_back, child_main, compile_for_hopper, equal_to,
                            forbid_triton, fresh_route, run_interpreter_child, save_child_results,
                            skip_if_interpreting, use_launcher)

from kernels import hash_noise as noise  # noqa: E402
from kernels import sample_rows  # noqa: E402
from kernels import sample_rows_triton as srt  # noqa: E402  (in the child: interpreted)
from kernels.sample_rows_reference import sample_rows_reference  # noqa: E402
from kernels.warp_pick_reference import sampling_temperature, warp_values_reference  # noqa: E402
from talker_service.model.sampling import RowSampling, choose_tokens_keyed  # noqa: E402
from warp_pick_cases import _keys, _logit_cases, _rows  # noqa: E402

OP_NAME = "qwen3tts.sample_rows"
NEAR_TIE = 1e-5
# rows per case in the interpreter (~0.1 s a row of 2048): enough rows to see every filter at work
ROWS = {"cand64": 96, "ties64": 64, "flat64": 64, "bf16_cand64": 64, "full2048": 48, "c0_full3072": 48}
EXACT_CASES = ("cand64", "ties64", "bf16_cand64", "full2048", "c0_full3072", "edges", "bf16_input", "bf16_ties",
               "fp16_input", "small_vocab")
CHOOSE_CASES = ("bf16_cand64", "c0_full3072")
DISPATCH_CASES = ("edges", "small_vocab")
GATHER_CASES = ("bf16_input", "c0_full3072", "edges")


def _args(logits, rows: RowSampling, keys):
    return (logits, rows.temperature, rows.top_k, rows.top_p, rows.do_sample, keys.contiguous())


def _edge_case():
    """top_k 1 / >= V / 0, top_p tiny and 1, temperatures 0.3 .. 1.7, greedy rows sent with
    temperature 0, a row of -inf but one token, a row with a NaN, a constant row."""
    gen = torch.Generator().manual_seed(77)
    bs, vocab = 24, 1000
    logits = torch.randn(bs, vocab, generator=gen) * 2.0
    logits[3, :] = float("-inf")
    logits[3, 417] = 0.5
    logits[5, 123] = float("nan")
    logits[7, :] = 1.25
    rows = RowSampling(
        temperature=torch.tensor([0.3, 0.9, 1.7, 1.0, 0.5, 0.9, 0.0, 0.7] * 3),
        top_k=torch.tensor([1, 0, 5000, 50, 2, 20, 50, 0] * 3),
        top_p=torch.tensor([1.0, 0.01, 0.9, 0.5, 1.0, 0.8, 0.3, 0.999] * 3),
        do_sample=torch.tensor([True, True, True, True, True, True, False, True] * 3))
    return _args(logits, rows, _keys(bs, gen, 4))


def _cases() -> dict:
    """name -> sample_rows arguments (plain tensors)."""
    cases = {name: _args(logits[:ROWS[name]], RowSampling(*(getattr(rows, f)[:ROWS[name]] for f in
                                                            ("temperature", "top_k", "top_p", "do_sample"))),
                         keys[:ROWS[name]])
             for name, (logits, rows, _, keys) in _logit_cases().items() if name in ROWS}
    cases["edges"] = _edge_case()
    # bf16 logits straight from a bf16 head (no .float() first): the kernel widens them itself
    gen = torch.Generator().manual_seed(5)
    rows = _rows(32, gen, [0, 5, 50], [1.0, 0.9, 0.6], [0.6, 0.9, 1.3], 0.2)
    cases["bf16_input"] = _args((torch.randn(32, 2048, generator=gen) * 3.0).bfloat16(), rows, _keys(32, gen, 2))
    # half-precision tensors shorten the bisections (kernels/sample_rows_triton.py KEY_SHIFT_BY_DTYPE): ties
    # on a 0.5 grid (negative ones too, whose dropped key bits are all ones) and random fp16 rows
    rows = _rows(48, gen, [0, 3, 10, 37, 50], [1.0, 0.9, 0.7, 0.4], [0.7, 1.0, 1.7], 0.1)
    cases["bf16_ties"] = _args(((torch.randn(48, 2048, generator=gen) * 4.0).round() / 2).bfloat16(), rows,
                               _keys(48, gen, 13))
    rows = _rows(48, gen, [0, 5, 50, 64], [1.0, 0.9, 0.6], [0.6, 0.9, 1.3], 0.2)
    cases["fp16_input"] = _args((torch.randn(48, 2048, generator=gen) * 3.0).half(), rows, _keys(48, gen, 14))
    rows = _rows(16, gen, [0, 1, 3, 9], [1.0, 0.7], [0.8, 1.2], 0.2)
    cases["small_vocab"] = _args(torch.randn(16, 7, generator=gen), rows, _keys(16, gen, 1))
    return cases


def _run_child(work_dir):
    cases = torch.load(work_dir / "cases.pt")
    outputs = {f"kernel/{name}": srt.sample_rows_triton(*case) for name, case in cases.items()}
    for name in DISPATCH_CASES:
        outputs[f"dispatch/{name}"] = sample_rows.sample_rows(*cases[name])
    for name in CHOOSE_CASES:
        logits, temperature, top_k, top_p, do_sample, keys = cases[name]
        rows = RowSampling(temperature, top_k, top_p, do_sample)
        outputs[f"choose/{name}"] = choose_tokens_keyed(logits, rows, keys, 64)
    for name in GATHER_CASES:
        outputs[f"gather/{name}"] = sample_rows.sample_rows_gather(*cases[name], *_gather_tables(cases[name][0]))
    with OpCounter() as counter:
        sample_rows.sample_rows(*cases["edges"])
    save_child_results(work_dir, outputs, sample_rows, srt.is_interpreting(), counter)


def _gather_tables(logits):
    """Two tables of the logits' vocabulary: bf16 (narrow) and fp32 wider than one copy block (1024),
    with NaN, -0.0 and subnormal entries (copied as bits, never as floats)."""
    gen = torch.Generator().manual_seed(logits.shape[-1])
    a = torch.randn(logits.shape[-1], 24, generator=gen).bfloat16()
    b = torch.randn(logits.shape[-1], 1040, generator=gen)
    a[:, 0], b[:, 1], b[:, 2] = float("nan"), -0.0, 1e-40
    return a, b


@pytest.fixture(scope="module")
def interpreted(tmp_path_factory):
    work_dir = tmp_path_factory.mktemp("sample_rows_interp")
    torch.save(_cases(), work_dir / "cases.pt")
    info = run_interpreter_child(__file__, work_dir, sample_rows.CPU_TRITON_ENV, timeout=600)
    return torch.load(work_dir / "cases.pt"), torch.load(work_dir / "outputs.pt"), info


def _near_tie(case, row) -> bool:
    """A top-p tail mass of the row within NEAR_TIE of 1 - top_p, or a Gumbel near-tie: where a
    different summation order may legitimately change the token. Never in a greedy row."""
    logits, temperature, top_k, top_p, do_sample, keys = (t[row:row + 1] for t in case)
    if not bool(do_sample):
        return False
    values, ids = torch.sort(logits.float(), dim=-1, descending=True, stable=True)
    values = values / sampling_temperature(temperature, do_sample)[:, None]
    only_k = warp_values_reference(values, top_k, torch.ones_like(top_p), logits.shape[-1])
    mass = only_k.double().softmax(-1).flip(-1).cumsum(-1).flip(-1)
    if float(top_p) < 1.0 and bool(((mass - float(1.0 - top_p)).abs() < NEAR_TIE).any()):
        return True
    scores = warp_values_reference(values, top_k, top_p, logits.shape[-1]) + noise.gumbel_for_tokens(keys, ids)
    top2 = scores[0].topk(min(2, scores.shape[1])).values
    return top2.numel() == 2 and bool(top2[0] - top2[1] < NEAR_TIE)


def test_kernel_equals_stable_sort_reference(interpreted):
    """Bit for bit on random rows, 0.5-grid ties, bf16 rows (as logits and as a bf16 tensor), full
    2048 / 3072 rows with penalties and -inf masks, and the edges (top_k 1, >= V, 0; top_p 0.01;
    greedy rows with temperature 0; a one-token row; a NaN row; a constant row; V = 7)."""
    cases, outputs, info = interpreted
    assert info["is_interpreting"], "the child must run the Triton interpreter, not a GPU kernel"
    sampled = 0
    for name in EXACT_CASES:
        ref = sample_rows_reference(*cases[name])
        out = outputs[f"kernel/{name}"]
        assert out.dtype == torch.int64 and out.shape == ref.shape, name
        assert torch.equal(out, ref), (name, (out != ref).nonzero().flatten().tolist())
        sampled += int(cases[name][4].sum())
    assert sampled >= 300, sampled
    edges = outputs["kernel/edges"]
    assert int(edges[3]) == 417, "a row with one finite token must pick it"
    assert int(edges[5]) == 123, "a NaN logit is picked, as the sort path (NaN sorts first) does"


def test_kernel_flat_rows_differ_only_at_near_ties(interpreted):
    """Logits on a grid of 2: tail masses hit 1 - top_p exactly in real arithmetic, so the summation
    order may decide; any differing row must be such a near-tie, and few."""
    cases, outputs, _ = interpreted
    ref = sample_rows_reference(*cases["flat64"])
    rows = (outputs["kernel/flat64"] != ref).nonzero().flatten().tolist()
    assert all(_near_tie(cases["flat64"], r) for r in rows), rows
    assert len(rows) <= 4, rows


def test_cases_exercise_both_filters(interpreted):
    """The cases are not trivial: top-k and top-p both drop tokens in many sampled rows."""
    cases, _, _ = interpreted
    k_drops = p_drops = 0
    for name in ("cand64", "ties64", "full2048"):
        logits, temperature, top_k, top_p, do_sample, _ = cases[name]
        values = logits.float().sort(dim=-1, descending=True, stable=True).values
        values = values / sampling_temperature(temperature, do_sample)[:, None]
        only_k = warp_values_reference(values, top_k, torch.ones_like(top_p), logits.shape[-1])
        both = warp_values_reference(values, top_k, top_p, logits.shape[-1])
        k_drops += int((torch.isfinite(only_k).sum(-1) < logits.shape[-1]).sum())
        p_drops += int((torch.isfinite(both).sum(-1) < torch.isfinite(only_k).sum(-1)).sum())
    assert k_drops >= 100 and p_drops >= 60, (k_drops, p_drops)


@pytest.mark.parametrize("name", CHOOSE_CASES)
def test_choose_tokens_keyed_takes_the_kernel(interpreted, name):
    """With the Triton path on, choose_tokens_keyed returns the kernel's tokens (candidate_k ignored:
    the kernel is exact for every top_k)."""
    _, outputs, _ = interpreted
    assert torch.equal(outputs[f"choose/{name}"], outputs[f"kernel/{name}"])


def test_dispatcher_uses_triton_when_forced(interpreted):
    _, outputs, info = interpreted
    assert_dispatch_equals_kernel(info, outputs, DISPATCH_CASES)
    assert info["triton_path_op_counts"] == {OP_NAME: 1}


@pytest.mark.parametrize("name", GATHER_CASES)
def test_gather_variant_picks_the_same_tokens_and_copies_their_rows(interpreted, name):
    """sample_rows_gather in one launch: the plain kernel's tokens, and each token's rows of both
    tables bit for bit (NaN, -0.0 and subnormals included)."""
    cases, outputs, info = interpreted
    tokens, rows_a, rows_b = outputs[f"gather/{name}"]
    assert torch.equal(tokens, outputs[f"kernel/{name}"])
    table_a, table_b = _gather_tables(cases[name][0])
    assert torch.equal(rows_a.view(torch.int16), table_a[tokens].view(torch.int16))
    assert torch.equal(rows_b.view(torch.int32), table_b[tokens].view(torch.int32))


# ---------------------------------------------------------------------------------------------
# Op registration and routing (in-process; the CPU default path never touches triton)


@pytest.fixture
def fresh_dispatcher(monkeypatch):
    return fresh_route(monkeypatch, sample_rows)


def _small_case():
    return _edge_case()


def test_cpu_default_keeps_the_sort_path(fresh_dispatcher):
    """On CPU, choose_tokens_keyed stays argmax + topk + warp_pick (no sample_rows op) and the op itself
    returns the reference."""
    forbid_triton(fresh_dispatcher, sample_rows)
    logits, temperature, top_k, top_p, do_sample, keys = case = _small_case()
    assert torch.equal(sample_rows.sample_rows(*case), sample_rows_reference(*case))
    with torch.no_grad(), OpCounter() as counter:
        choose_tokens_keyed(logits, RowSampling(temperature, top_k, top_p, do_sample), keys, 64)
    assert OP_NAME not in counter.counts and counter.counts["aten.topk"] == 1, counter.counts


def test_forced_path_calls_launcher_and_choose_tokens_is_one_op(fresh_dispatcher):
    launcher = use_launcher(fresh_dispatcher, sample_rows,
                            CountingLauncher(lambda *args: sample_rows_reference(*args) + 100_000))
    logits, temperature, top_k, top_p, do_sample, keys = case = _small_case()
    ref = sample_rows_reference(*case)
    assert torch.equal(sample_rows.sample_rows(*case), ref + 100_000)
    with torch.no_grad(), OpCounter() as counter:
        out = choose_tokens_keyed(logits, RowSampling(temperature, top_k, top_p, do_sample), keys, 64)
    assert dict(counter.counts) == {OP_NAME: 1}, counter.counts
    assert torch.equal(out, ref + 100_000) and launcher.num_calls == 2
    # a vocabulary past the kernel's limit: choose_tokens_keyed keeps the sort path
    big = torch.randn(2, sample_rows.MAX_VOCAB + 1)
    assert not sample_rows.wants_triton(big)
    # logits that require grad are detached, still one kernel call
    assert torch.equal(sample_rows.sample_rows(logits.clone().requires_grad_(True), *case[1:]), ref + 100_000)
    assert launcher.num_calls == 3


def test_failure_is_logged_once_and_remembered(fresh_dispatcher, caplog):
    case = _small_case()
    check_failure_logged_once_and_remembered(fresh_dispatcher, caplog, sample_rows,
                                             lambda: sample_rows.sample_rows(*case),
                                             equal_to(sample_rows_reference(*case)))


def test_import_failure_is_recorded(fresh_dispatcher, caplog):
    case = _small_case()
    check_import_failure_is_recorded(fresh_dispatcher, caplog, sample_rows, lambda: sample_rows.sample_rows(*case),
                                     equal_to(sample_rows_reference(*case)))


def test_real_launch_failure_falls_back(fresh_dispatcher):
    case = _small_case()
    check_real_launch_failure_falls_back(fresh_dispatcher, sample_rows, srt, lambda: sample_rows.sample_rows(*case),
                                         equal_to(sample_rows_reference(*case)))


def test_gather_on_the_default_cpu_path_indexes_the_reference_tokens(fresh_dispatcher):
    forbid_triton(fresh_dispatcher, sample_rows)
    case = _small_case()
    table_a, table_b = _gather_tables(case[0])
    tokens, rows_a, rows_b = sample_rows.sample_rows_gather(*case, table_a, table_b)
    ref = sample_rows_reference(*case)
    assert torch.equal(tokens, ref)
    assert torch.equal(rows_a.view(torch.int16), table_a[ref].view(torch.int16))
    assert torch.equal(rows_b.view(torch.int32), table_b[ref].view(torch.int32))
    # choose_tokens_and_rows off the kernel: the sort path's tokens, then the same lookups
    from talker_service.model.sampling import choose_tokens_and_rows
    logits, temperature, top_k, top_p, do_sample, keys = case
    rows = RowSampling(temperature, top_k, top_p, do_sample)
    got = choose_tokens_and_rows(logits, rows, keys, (table_a, table_b), 64)
    want = choose_tokens_keyed(logits, rows, keys, 64)
    assert torch.equal(got[0], want) and torch.equal(got[2], table_b[want])


def test_gather_forced_path_is_one_op_and_checks_its_tables(fresh_dispatcher):
    from talker_service.model.sampling import choose_tokens_and_rows

    fresh_route(fresh_dispatcher, sample_rows, "_gather_route")
    case = _small_case()
    table_a, table_b = _gather_tables(case[0])
    ref = sample_rows._reference_gather_op(*case, table_a, table_b)
    launcher = use_launcher(fresh_dispatcher, sample_rows,
                            CountingLauncher(lambda *args: (ref[0] + 100_000, ref[1], ref[2])), "_gather_route")
    logits, temperature, top_k, top_p, do_sample, keys = case
    with torch.no_grad(), OpCounter() as counter:
        got = choose_tokens_and_rows(logits, RowSampling(temperature, top_k, top_p, do_sample), keys,
                                     (table_a, table_b))
    assert dict(counter.counts) == {"qwen3tts.sample_rows_gather": 1}, counter.counts
    assert torch.equal(got[0], ref[0] + 100_000) and launcher.num_calls == 1
    for bad, match in ((table_a[:-1], r"table_a must be \[V=1000, W\]"), (table_a[0], r"table_a must be")):
        with pytest.raises(ValueError, match=match):
            sample_rows.sample_rows_gather(*case, bad, table_b)
    assert sample_rows.gather_triton_failure() is None, "bad input must not disable the kernel"


def test_make_fx_sees_one_node_and_opcheck():
    from torch.fx.experimental.proxy_tensor import make_fx

    case = _small_case()
    gm = make_fx(sample_rows.sample_rows, tracing_mode="fake")(*case)
    calls = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert calls == [torch.ops.qwen3tts.sample_rows.default], calls
    torch.library.opcheck(torch.ops.qwen3tts.sample_rows.default, case)
    tables = tuple(torch.nan_to_num(t) for t in _gather_tables(case[0]))   # opcheck compares with ==
    gm = make_fx(sample_rows.sample_rows_gather, tracing_mode="fake")(*case, *tables)
    calls = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert torch.ops.qwen3tts.sample_rows_gather.default in calls, calls
    torch.library.opcheck(torch.ops.qwen3tts.sample_rows_gather.default, (*case, *tables))


@pytest.mark.parametrize("index, change, match", [
    (0, lambda t: t[0], r"\[bs, V\]"),
    (0, lambda t: t.long(), r"float logits"),
    (0, lambda t: t[:, :0], r"V >= 1"),
    (1, lambda t: t[:-1], r"temperature \[bs\]"),
    (2, lambda t: t.int(), r"top_k \[bs\]"),
    (3, lambda t: t.double(), r"top_p \[bs\]"),
    (4, lambda t: t.long(), r"do_sample \[bs\]"),
    (5, lambda t: t[:-1], r"keys \[bs\]"),
    (3, lambda t: t.to("meta"), r"top_p is on meta"),
])
def test_bad_arguments_raise_value_error(fresh_dispatcher, index, change, match):
    case = list(_small_case())
    case[index] = change(case[index])
    with pytest.raises(ValueError, match=match):
        sample_rows.sample_rows(*case)
    assert sample_rows.triton_failure() is None, "bad input must not disable the kernel"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kernel_compiles_for_hopper(dtype):
    """sm_90 compile of a 4096 block (codebook 0's 3072 tokens): libdevice's expf, IEEE divisions, the
    noise hash's 32-bit multiplies, and no sort (no bitonic shuffles of a sort network); fp32 logits
    (codebook 0, penalized) and bf16 ones (the code predictor's heads: 16-bit keys)."""
    skip_if_interpreting(srt)
    signature = {"logits_ptr": "*fp32" if dtype == torch.float32 else "*bf16", "temperature_ptr": "*fp32",
                 "top_k_ptr": "*i64", "top_p_ptr": "*fp32",
                 "do_sample_ptr": "*u8", "keys_ptr": "*i64", "out_ptr": "*i64", "vocab_size": "i32",
                 "logits_row_stride": "i32", "temperature_stride": "i32", "top_k_stride": "i32",
                 "top_p_stride": "i32", "do_sample_stride": "i32", "keys_stride": "i32",
                 "ta_ptr": "*i16", "tb_ptr": "*i16", "oa_ptr": "*i16", "ob_ptr": "*i16", "width_a": "i32",
                 "width_b": "i32", "ta_stride": "i32", "tb_stride": "i32",
                 "LIBDEVICE_EXP": "constexpr", "BLOCK_V": "constexpr", "KEY_SHIFT": "constexpr",
                 "GATHER": "constexpr", "BLOCK_W": "constexpr"}
    # bf16 logits: the code predictor's heads, whose launches also copy the next step's table rows
    constants = {"LIBDEVICE_EXP": True, "BLOCK_V": 4096, "KEY_SHIFT": srt.KEY_SHIFT_BY_DTYPE[dtype],
                 "GATHER": dtype == torch.bfloat16, "BLOCK_W": 1024}
    kernel = compile_for_hopper(srt._sample_rows_kernel, signature, constants, num_warps=8, enable_fp_fusion=False)
    ptx = kernel.asm["ptx"]
    for op in ("ex2.approx.ftz.f32", "__nv_logf", "div.rn.f32", "mul.lo.s32"):
        assert op in ptx, op
    assert "div.full" not in ptx


# ---------------------------------------------------------------------------------------------
# CUDA (skipped without a GPU)

cuda_only = pytest.mark.skipif(not torch.cuda.is_available() or srt.is_interpreting(), reason="needs a CUDA GPU")


@cuda_only
def test_cuda_kernel_matches_reference():
    """torch's CUDA softmax/cumsum sum in another order than the kernel: near-ties only."""
    for name, case in _cases().items():
        gpu = tuple(t.cuda() for t in case)
        ref = sample_rows_reference(*gpu).cpu()
        out = sample_rows.sample_rows(*gpu).cpu()
        rows = (out != ref).nonzero().flatten().tolist()
        assert all(_near_tie(case, r) for r in rows), (name, rows)
    assert sample_rows.triton_failure() is None


@cuda_only
def test_cuda_gather_variant_equals_the_kernel_and_indexing():
    for name in GATHER_CASES:
        gpu = tuple(t.cuda() for t in _cases()[name])
        tables = tuple(t.cuda() for t in _gather_tables(gpu[0]))
        tokens, rows_a, rows_b = sample_rows.sample_rows_gather(*gpu, *tables)
        assert torch.equal(tokens, sample_rows.sample_rows(*gpu)), name
        assert torch.equal(rows_a.view(torch.int16), tables[0][tokens].view(torch.int16)), name
        assert torch.equal(rows_b.view(torch.int32), tables[1][tokens].view(torch.int32)), name
    assert sample_rows.gather_triton_failure() is None


@cuda_only
def test_cuda_graph_capture_and_replay():
    case = tuple(t.cuda().contiguous() for t in _cases()["cand64"])
    logits = case[0]
    sample_rows.sample_rows(*case)  # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = sample_rows.sample_rows(*case)
    gen = torch.Generator().manual_seed(8)
    for _ in range(3):
        logits.copy_(torch.randn(logits.shape, generator=gen) * 3.0)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, sample_rows_reference(*case)) or all(
            _near_tie(tuple(t.cpu() for t in case), r)
            for r in (out != sample_rows_reference(*case)).nonzero().flatten().tolist())


if __name__ == "__main__":
    child_main(_run_child)
