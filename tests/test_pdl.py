"""Programmatic dependent launch (kernels/pdl.py): when launches use it, that every kernel with a
PDL flag waits for the prior grid before anything else, and (on a Hopper GPU) that a decode step
captured with PDL gives exactly the frames it gives without, at the batches captured with it."""
from __future__ import annotations

import ast
import inspect
import textwrap

import pytest
import torch

from kernels import pdl

PDL_KERNELS = [
    ("kernels.add_rmsnorm_triton", "_add_rms_norm_kernel"),
    ("kernels.rmsnorm_triton", "_rms_norm_kernel"),
    ("kernels.qk_norm_rope_triton", "_qk_norm_rope_kernel"),
    ("kernels.qk_norm_rope_triton", "_qk_norm_rope_write_kv_kernel"),
    ("kernels.slot_attention_triton", "_slot_decode_attn_kernel"),
    ("kernels.slot_attention_triton", "_merge_splits_kernel"),
    ("kernels.silu_mul_triton", "_silu_mul_kernel"),
    ("kernels.sample_rows_triton", "_sample_rows_kernel"),
    ("kernels.small_m_linear_triton", "_small_m_linear_kernel"),
    ("kernels.noise_keys_triton", "_noise_keys_kernel"),
]


def test_off_outside_a_scope_and_off_the_gpu(monkeypatch):
    monkeypatch.setattr(pdl, "_capable", lambda index: True)
    monkeypatch.delenv(pdl.ENV, raising=False)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    gpu = torch.device("cuda", 0)
    assert not pdl.use_pdl(gpu)                        # no scope: off
    assert pdl.pdl_launch(gpu) == {"PDL": False}
    with pdl.scope(True):
        assert pdl.use_pdl(gpu) == pdl.HAVE_GDC
        assert not pdl.use_pdl(torch.device("cpu"))
        with pdl.scope(False):
            assert not pdl.use_pdl(gpu)
        assert pdl.use_pdl(gpu) == pdl.HAVE_GDC          # the inner scope restored the outer one
        if pdl.HAVE_GDC:
            assert pdl.pdl_launch(gpu) == {"PDL": True, "launch_pdl": True}
        monkeypatch.setenv(pdl.ENV, "0")
        assert not pdl.use_pdl(gpu)                    # the A/B switch
        monkeypatch.setenv(pdl.ENV, "1")
        monkeypatch.setenv("TRITON_INTERPRET", "1")
        assert not pdl.use_pdl(gpu)                    # the interpreter has no griddepcontrol
        monkeypatch.delenv("TRITON_INTERPRET")
        monkeypatch.setattr(pdl, "_capable", lambda index: False)
        assert not pdl.use_pdl(gpu)                    # pre-Hopper
    assert not pdl.use_pdl(gpu)


def test_decode_graphs_take_pdl_exactly_where_their_gemms_are_the_few_row_kernel(monkeypatch):
    from kernels import small_m_linear
    from talker_service.engine.graphs import captures_with_pdl

    monkeypatch.delenv(small_m_linear.ENABLE_ENV, raising=False)
    assert [b for b in (1, 2, 4, 8, 256) if captures_with_pdl(b, "cuda")] == [1, 2]
    assert not captures_with_pdl(1, "cpu")
    monkeypatch.setenv(small_m_linear.ENABLE_ENV, "0")        # kernel off: cuBLAS GEMMs, no PDL
    assert not captures_with_pdl(1, "cuda")
    monkeypatch.setenv(small_m_linear.ENABLE_ENV, "1")        # kernel up to MAX_ROWS
    assert captures_with_pdl(small_m_linear.MAX_ROWS, "cuda") and not captures_with_pdl(32, "cuda")


def test_scope_is_per_thread():
    import threading

    seen = []
    with pdl.scope(True):
        thread = threading.Thread(target=lambda: seen.append(getattr(pdl._state, "allowed", False)))
        thread.start()
        thread.join(timeout=10)
    assert seen == [False]


@pytest.mark.parametrize("module, name", PDL_KERNELS)
def test_every_pdl_kernel_waits_before_anything_else(module, name):
    """The rule that makes a PDL launch safe whatever ran before: the kernel's first statement (after
    its docstring) is `if PDL: wait_for_prior_grid()`, and its launcher passes pdl_launch."""
    import importlib

    mod = importlib.import_module(module)
    kernel = getattr(mod, name)
    assert "PDL" in kernel.arg_names
    fn = ast.parse(textwrap.dedent(inspect.getsource(kernel.fn))).body[0]
    body = fn.body
    if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    first = body[0]
    assert isinstance(first, ast.If) and ast.unparse(first.test) == "PDL", ast.unparse(first)
    assert ast.unparse(first.body[0]).strip() == "wait_for_prior_grid()"
    calls = [node for node in ast.walk(ast.parse(inspect.getsource(mod)))
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript)
             and ast.unparse(node.func.value) == name]
    assert calls, f"no launch of {name}"
    for call in calls:
        assert any(kw.arg is None and ast.unparse(kw.value).startswith("pdl_launch(") for kw in call.keywords)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@torch.no_grad()
@pytest.mark.parametrize("batch", [1, 2])   # the batches captured with PDL (graphs.captures_with_pdl)
def test_a_small_batch_step_captured_with_pdl_gives_the_same_frames(batch):
    if torch.cuda.get_device_capability() < pdl.MIN_CAPABILITY:
        pytest.skip("PDL needs compute capability >= 9")
    from benchmarks.bench_talker import FrameStep, build_random
    from checkpoint.configs import model_config
    from talker_service.engine.graphs import capture_graph
    from talker_service.model import TalkerConfig

    config = TalkerConfig.from_dict(model_config("custom_voice", "tiny")["talker_config"])
    decoder = build_random(config, "cuda", torch.bfloat16, 3, 64, 64)
    step = FrameStep(decoder, batch, 48, 8)
    with_pdl, _ = capture_graph(step, use_pdl=True)
    without, _ = capture_graph(step, use_pdl=False)
    table = decoder.table
    for _ in range(4):
        state = (step.embeds.clone(), step.steps.clone(), table.history.clone())
        with_pdl.replay()
        got = (step.codes.clone(), step.embeds.clone())
        step.embeds.copy_(state[0])
        step.steps.copy_(state[1])
        table.history.copy_(state[2])
        without.replay()
        torch.cuda.synchronize()
        assert torch.equal(got[0], step.codes)
        assert torch.equal(got[1], step.embeds)
