"""Per-frame noise keys: the reference vs hash_noise's per-group keys, the Triton kernel (CPU
interpreter) vs the reference bit for bit, the qwen3tts::noise_keys op and its routing.

As in tests/test_gumbel_pick.py, every interpreted launch happens in one child process started with
TRITON_INTERPRET=1 and QWEN3_TTS_NOISEKEYS_CPU_TRITON=1 (`python tests/test_noise_keys.py --child DIR`):
the parent writes the inputs, the child only runs the kernel and the dispatcher, the parent compares.
Routing and the op registration are tested in-process with stand-in launchers; CUDA tests skip here.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

# triton_support first: it puts the repo root on sys.path for the kernels imports below
from triton_support import (CountingLauncher, OpCounter, assert_dispatch_equals_kernel,
                            check_failure_logged_once_and_remembered, check_import_failure_is_recorded,
                            check_real_launch_failure_falls_back, child_main, compile_for_hopper, equal_to,
                            forbid_triton, fresh_route, run_interpreter_child, save_child_results,
                            skip_if_interpreting, use_launcher)

from kernels import hash_noise as noise  # noqa: E402
from kernels import noise_keys  # noqa: E402
from kernels import noise_keys_triton as nkt  # noqa: E402  (in the child: interpreted, TRITON_INTERPRET=1)
from kernels.noise_keys_reference import MAX_GROUPS, noise_keys_reference  # noqa: E402

OP_NAME = "qwen3tts.noise_keys"
FRAME_GROUPS = (0, 16)  # what talker_service.model.frame asks for: codebook 0 and the 15 residual groups


# ---------------------------------------------------------------------------------------------
# Inputs


def _edge_seeds_steps():
    """Seeds at the 32-bit split (the kernel truncates int64 -> uint32 and shifts) and steps past 2**32
    (only their low 32 bits count, as in hash_noise)."""
    seeds = torch.tensor([0, 1, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**32 + 1, 2**62 + 12345, 2**63 - 1, 987654321])
    steps = torch.tensor([0, 5, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**32 + 7, 2**40 + 9, 1, 1999])
    return seeds, steps


def _cases():
    """name -> (seeds [bs], steps [bs], first_group, num_groups), fixed seeds."""
    gen = torch.Generator().manual_seed(31)
    cases = {}
    seeds, steps = _edge_seeds_steps()
    cases["edges_frame"] = (seeds, steps, *FRAME_GROUPS)
    seeds, steps = torch.randint(0, 2**63 - 1, (300,), generator=gen), torch.randint(0, 2**33, (300,), generator=gen)
    cases["random_frame"] = (seeds, steps, *FRAME_GROUPS)
    cases["random_residual"] = (seeds, steps, 1, 15)   # the code predictor's groups alone
    cases["one_group"] = (seeds[:7], steps[:7], 5, 1)
    cases["wide"] = (seeds[:9], steps[:9], 3, 40)      # more groups than one 16-block, a masked tail
    cases["high_groups"] = (seeds[:5], steps[:5], MAX_GROUPS - 20, 20)  # salts wrap past 2**32
    cases["one_row"] = (seeds[:1], steps[:1], *FRAME_GROUPS)  # the talker at batch 1
    # strided columns, as a packed per-slot table gathers them
    table = torch.randint(0, 2**63 - 1, (12, 3), generator=gen)
    cases["strided"] = (table[:, 1], torch.randint(0, 5000, (24,), generator=gen)[::2], *FRAME_GROUPS)
    return cases


# ---------------------------------------------------------------------------------------------
# The reference is hash_noise's per-group chain


@pytest.mark.parametrize("name", list(_cases()))
def test_reference_equals_row_keys_group_by_group(name):
    seeds, steps, first, num = _cases()[name]
    keys = noise_keys_reference(seeds, steps, first, num)
    assert keys.dtype == torch.int64 and keys.shape == (seeds.shape[0], num) and keys.is_contiguous()
    expected = torch.stack([noise.row_keys(seeds, steps, g) for g in range(first, first + num)], dim=1)
    assert torch.equal(keys, expected)
    assert bool((keys >= 0).all()) and bool((keys < 2**32).all())


def test_kernel_constants_are_hash_noise_constants():
    assert nkt.GROUP_SALT == noise._GROUP_SALT
    assert noise._group_salt(1) == (nkt.GROUP_MUL + nkt.GROUP_SALT) & noise._MASK32
    assert noise._group_salt(0) == nkt.GROUP_SALT


# ---------------------------------------------------------------------------------------------
# Kernel under the Triton interpreter (child process)


@pytest.fixture(scope="module")
def interpreted(tmp_path_factory):
    work_dir = tmp_path_factory.mktemp("noise_keys_interp")
    torch.save(_cases(), work_dir / "cases.pt")
    info = run_interpreter_child(__file__, work_dir, noise_keys.CPU_TRITON_ENV, timeout=180)
    return torch.load(work_dir / "cases.pt"), torch.load(work_dir / "outputs.pt"), info


@pytest.mark.parametrize("name", list(_cases()))
def test_kernel_matches_reference_bit_for_bit(interpreted, name):
    cases, outputs, info = interpreted
    assert info["is_interpreting"], "the child must run the Triton interpreter, not a GPU kernel"
    ref = noise_keys_reference(*cases[name])
    out = outputs[f"kernel/{name}"]
    assert out.dtype == torch.int64 and out.shape == ref.shape and out.is_contiguous()
    assert torch.equal(out, ref), f"{name}: entries {(out != ref).nonzero().tolist()[:8]} differ"


def test_dispatcher_uses_triton_when_forced(interpreted):
    cases, outputs, info = interpreted
    assert_dispatch_equals_kernel(info, outputs, cases)


def test_op_is_one_dispatch_on_triton_path(interpreted):
    _, _, info = interpreted
    assert info["triton_path_op_counts"] == {OP_NAME: 1}


# ---------------------------------------------------------------------------------------------
# Op registration, counting, tracing (in-process; CPU default path = reference inside the op)


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_op_counts_as_one_launch(device):
    seeds, steps, first, num = _cases()["random_frame"]
    seeds, steps = seeds.to(device), steps.to(device)
    with torch.no_grad(), OpCounter() as counter:
        out = noise_keys.noise_keys(seeds, steps, first, num)
    assert dict(counter.counts) == {OP_NAME: 1}
    assert out.shape == (seeds.shape[0], num) and out.dtype == torch.int64 and out.device.type == device
    with torch.no_grad(), OpCounter() as eager:
        noise_keys_reference(seeds, steps, first, num)
    assert sum(eager.counts.values()) >= 60, eager.counts  # what the op replaces


def test_make_fx_sees_one_node():
    from torch.fx.experimental.proxy_tensor import make_fx

    seeds, steps, first, num = _cases()["edges_frame"]
    gm = make_fx(lambda a, b: noise_keys.noise_keys(a, b, first, num), tracing_mode="fake")(seeds, steps)
    calls = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert calls == [torch.ops.qwen3tts.noise_keys.default], calls


def test_opcheck():
    seeds, steps, first, num = _cases()["edges_frame"]
    torch.library.opcheck(torch.ops.qwen3tts.noise_keys.default, (seeds, steps, first, num))


# ---------------------------------------------------------------------------------------------
# Dispatcher routing and fallbacks (in-process, stand-in launchers)


@pytest.fixture
def fresh_dispatcher(monkeypatch):
    return fresh_route(monkeypatch, noise_keys)


def _stand_in():
    return CountingLauncher(lambda *args: noise_keys_reference(*args) + 2**40)  # distinguishable


def _small_case():
    return _cases()["edges_frame"]


def test_cpu_default_uses_reference_without_touching_triton(fresh_dispatcher):
    forbid_triton(fresh_dispatcher, noise_keys)
    case = _small_case()
    assert torch.equal(noise_keys.noise_keys(*case), noise_keys_reference(*case))


def test_forced_cpu_path_calls_launcher(fresh_dispatcher):
    launcher = use_launcher(fresh_dispatcher, noise_keys, _stand_in())
    case = _small_case()
    assert torch.equal(noise_keys.noise_keys(*case), noise_keys_reference(*case) + 2**40)
    seeds, steps, first, num = case
    empty = noise_keys.noise_keys(seeds[:0], steps[:0], first, num)  # no rows: eager, launcher untouched
    assert empty.shape == (0, num) and empty.dtype == torch.int64
    assert launcher.num_calls == 1


def test_failure_is_logged_once_and_remembered(fresh_dispatcher, caplog):
    case = _small_case()
    check_failure_logged_once_and_remembered(fresh_dispatcher, caplog, noise_keys,
                                             lambda: noise_keys.noise_keys(*case),
                                             equal_to(noise_keys_reference(*case)))


def test_import_failure_is_recorded(fresh_dispatcher, caplog):
    case = _small_case()
    check_import_failure_is_recorded(fresh_dispatcher, caplog, noise_keys, lambda: noise_keys.noise_keys(*case),
                                     equal_to(noise_keys_reference(*case)))


def test_real_launch_failure_falls_back(fresh_dispatcher):
    case = _small_case()
    check_real_launch_failure_falls_back(fresh_dispatcher, noise_keys, nkt, lambda: noise_keys.noise_keys(*case),
                                         equal_to(noise_keys_reference(*case)))


@pytest.mark.parametrize("mutate, match", [
    (lambda s, t, f, n: (s[None], t, f, n), r"one shape \[bs\]"),
    (lambda s, t, f, n: (s, t[:-1], f, n), r"one shape \[bs\]"),
    (lambda s, t, f, n: (s.int(), t, f, n), r"int64 seeds and steps"),
    (lambda s, t, f, n: (s, t.to("meta"), f, n), r"steps is on meta"),
    (lambda s, t, f, n: (s, t, -1, n), r"first_group >= 0"),
    (lambda s, t, f, n: (s, t, f, 0), r"num_groups >= 1"),
    (lambda s, t, f, n: (s, t, MAX_GROUPS, 1), r"groups below"),
    (lambda s, t, f, n: (s, t, 1.0, n), r"int first_group"),
    (lambda s, t, f, n: (s, t, f, True), r"int num_groups"),
])
def test_bad_arguments_raise_value_error(fresh_dispatcher, mutate, match):
    with pytest.raises(ValueError, match=match):
        noise_keys.noise_keys(*mutate(*_small_case()))
    assert noise_keys.triton_failure() is None, "bad input must not disable the kernel"


def test_kernel_compiles_for_hopper():
    """Ahead-of-time compile to an sm_90 cubin (no GPU needed): 32-bit wrap-around multiplies, logical
    shifts, and the keys stored zero-extended (uint32 -> int64: cvt.u64.u32), as the reference's keys
    in [0, 2**32) are."""
    skip_if_interpreting(nkt)
    signature = {"seeds_ptr": "*i64", "steps_ptr": "*i64", "out_ptr": "*i64", "first_group": "i32",
                 "num_groups": "i32", "seeds_stride": "i32", "steps_stride": "i32", "BLOCK_G": "constexpr"}
    kernel = compile_for_hopper(nkt._noise_keys_kernel, signature, {"BLOCK_G": 16}, num_warps=1,
                                enable_fp_fusion=False)
    ptx = kernel.asm["ptx"]
    for op in ("mul.lo.s32", "shr.u32", "cvt.u64.u32", "st.global.b64"):
        assert op in ptx, op


# ---------------------------------------------------------------------------------------------
# CUDA (skipped without a GPU): kernel == reference, graph capture

cuda_only = pytest.mark.skipif(not torch.cuda.is_available() or nkt.is_interpreting(), reason="needs a CUDA GPU")


@cuda_only
def test_cuda_kernel_matches_reference():
    for name, (seeds, steps, first, num) in _cases().items():
        ref = noise_keys_reference(seeds, steps, first, num)
        assert torch.equal(nkt.noise_keys_triton(seeds.cuda(), steps.cuda(), first, num).cpu(), ref), name
        assert torch.equal(noise_keys.noise_keys(seeds.cuda(), steps.cuda(), first, num).cpu(), ref), name
    gen = torch.Generator().manual_seed(4)
    seeds, steps = torch.randint(0, 2**63 - 1, (1 << 16,), generator=gen), torch.randint(0, 2**34, (1 << 16,), generator=gen)
    ref = noise_keys_reference(seeds, steps, *FRAME_GROUPS)
    assert torch.equal(nkt.noise_keys_triton(seeds.cuda(), steps.cuda(), *FRAME_GROUPS).cpu(), ref)
    assert noise_keys.triton_failure() is None


@cuda_only
def test_cuda_graph_capture_and_replay():
    seeds, steps, first, num = (t.cuda() if torch.is_tensor(t) else t for t in _cases()["random_frame"])
    noise_keys.noise_keys(seeds, steps, first, num)  # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = noise_keys.noise_keys(seeds, steps, first, num)
    gen = torch.Generator().manual_seed(8)
    for _ in range(3):
        seeds.copy_(torch.randint(0, 2**63 - 1, seeds.shape, generator=gen))
        steps.copy_(torch.randint(0, 20000, steps.shape, generator=gen))
        graph.replay()
        assert torch.equal(out.cpu(), noise_keys_reference(seeds.cpu(), steps.cpu(), first, num))


# ---------------------------------------------------------------------------------------------
# Child process body


def _run_child(work_dir: Path) -> None:
    torch.set_num_threads(1)  # as tests/conftest.py does for the parent: the 2-core CI runs both at once
    cases = torch.load(work_dir / "cases.pt")
    outputs = {}
    for name, case in cases.items():
        outputs[f"kernel/{name}"] = nkt.noise_keys_triton(*case)
        outputs[f"dispatch/{name}"] = noise_keys.noise_keys(*case)
    with torch.no_grad(), OpCounter() as counter:
        noise_keys.noise_keys(*cases["edges_frame"])
    save_child_results(work_dir, outputs, noise_keys, nkt.is_interpreting(), counter)


if __name__ == "__main__":
    child_main(_run_child)
