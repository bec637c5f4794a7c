"""Which captured decode shapes replay a compiled step (vocoder_service/runtime/compile_plan.py).

The compiler is injected: a recorder stands in for torch.compile, so these tests check on CPU
which shapes get which body, that each kind is compiled once, and that the service config turns
into the plan it documents. (The compiled kernels themselves run on the GPU:
benchmarks/probe_vocoder_compile.py.)
"""
from __future__ import annotations

import functools
import os

import numpy as np
import pytest
import torch
import torch._dynamo.utils

from test_decoder_fixtures import random_codes, single_thread, tiny_code2wav  # noqa: F401 (single_thread: autouse fixture)
from vocoder_service.codec import StreamingDecoder
from vocoder_service.main import config_from
from vocoder_service.runtime.compile_plan import CompilePlan, compile_step, use_cache_dir
from vocoder_service.runtime.graphs import GraphTable
from vocoder_service.server.config import VocoderServiceConfig

BUDGET_BYTES = 1 << 30


class RecordingCompiler:
    """Stands in for torch.compile: records each call and returns a marked pass-through."""

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def __call__(self, fn, mode: str, dynamic: bool):
        self.calls.append({"fn": fn, "mode": mode, "dynamic": dynamic})

        def compiled(codes, slots, lengths):
            return fn(codes, slots, lengths)
        compiled.dynamic = dynamic
        return compiled


@pytest.fixture(scope="module")
def model():
    return tiny_code2wav()


def test_shape_kinds():
    plan = CompilePlan(lambda *a: None, max_row_frames=2, dynamic_batch_frames=(25, 16))
    kinds = {(b, t): plan.kind_for(b, t) for b, t in [(1, 1), (2, 1), (1, 2), (1, 25), (2, 25), (64, 25),
                                                      (256, 16), (4, 4), (3, 1)]}
    assert kinds == {(1, 1): "static", (2, 1): "static", (1, 2): "static", (1, 25): "plain", (2, 25): "dynamic",
                     (64, 25): "dynamic", (256, 16): "dynamic", (4, 4): "plain", (3, 1): "plain"}
    assert CompilePlan(lambda *a: None).is_empty and not plan.is_empty
    with pytest.raises(ValueError, match="max_row_frames must be >= 0"):
        CompilePlan(lambda *a: None, max_row_frames=-1)
    with pytest.raises(ValueError, match="positive frame counts"):
        CompilePlan(lambda *a: None, dynamic_batch_frames=(0,))


def test_each_kind_is_compiled_once_under_its_own_code():
    compiler = RecordingCompiler()
    plan = CompilePlan(lambda *a: None, max_row_frames=1, dynamic_batch_frames=(25,), compiler=compiler)
    assert plan.body_for(1, 4) is None and compiler.calls == []     # plain shapes compile nothing
    small = plan.body_for(1, 1)
    big = [plan.body_for(b, 25) for b in (2, 64, 128)]
    assert plan.body_for(1, 1) is small and big[0] is big[1] is big[2]
    assert [c["dynamic"] for c in compiler.calls] == [False, None]   # None: batch marked dynamic per call
    # dynamo caches per code object: the two entries must not share one
    assert compiler.calls[0]["fn"].__code__ is not compiler.calls[1]["fn"].__code__


def test_compile_step_passes_mode_and_dynamic():
    compiler = RecordingCompiler()
    body = compile_step(lambda c, s, n: (c, s, n), mode="max-autotune", dynamic=False, compiler=compiler)
    assert compiler.calls[0]["mode"] == "max-autotune" and compiler.calls[0]["dynamic"] is False
    assert body(1, 2, 3) == (1, 2, 3)


def test_dynamic_compile_covers_every_batch_size_once_and_each_frame_count_apart():
    """Real dynamo (eager backend: guards and graphs, no code generation): the batch dimension is
    symbolic from the first call, so 2, 4 and 8 rows share one graph; frame counts stay static."""
    def step(codes, slots, lengths):   # shape-dependent like the decoder: rows x (books * frames)
        flat = codes.float().reshape(codes.shape[0], -1)
        return flat.sum(1) * flat.shape[1] + slots + lengths
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    body = compile_step(step, dynamic=True, compiler=functools.partial(torch.compile, backend="eager"))
    for rows, frames in [(2, 25), (4, 25), (8, 25), (64, 25)]:
        codes = torch.ones(rows, 16, frames, dtype=torch.int64)
        out = body(codes, torch.arange(rows), torch.full((rows,), frames))
        assert torch.equal(out, step(codes, torch.arange(rows), torch.full((rows,), frames)))
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1
    body(torch.ones(4, 16, 16, dtype=torch.int64), torch.arange(4), torch.full((4,), 16))
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 2
    torch._dynamo.reset()


def test_graph_table_gives_each_shape_its_body_and_streams_exactly(model):
    decoder = StreamingDecoder(model, max_slots=4)
    compiler = RecordingCompiler()
    plan = CompilePlan(decoder.step_unchecked, max_row_frames=1, dynamic_batch_frames=(4,), compiler=compiler)
    table = GraphTable(decoder, emulate=True, compile_plan=plan)
    report = table.capture([1, 2, 4], [1, 4], BUDGET_BYTES)
    bodies = {shape: step.body for shape, step in table.steps.items()}
    assert bodies[(1, 1)].dynamic is False
    assert bodies[(4, 4)] is bodies[(2, 4)] and bodies[(2, 4)].__name__ == "batch_dynamic_step"
    for plain in [(2, 1), (4, 1), (1, 4)]:
        assert bodies[plain] == decoder.step_unchecked
    assert {k: v["kind"] for k, v in report.compiled.items()} == {"1x1": "static", "2x4": "dynamic", "4x4": "dynamic"}
    # A compiled body carries state like the plain one: streaming 1 + 4 frames equals one 5-frame step.
    codes = random_codes(1, 5, seed=7, codebook_size=model.config.codebook_size).numpy()   # [1, 16, 5]
    first = table.find(1, 1).run(codes[:, :, :1], np.array([0]), np.array([1]))
    rest = table.find(2, 4).run(codes[:, :, 1:], np.array([0]), np.array([4]))
    whole = StreamingDecoder(model, max_slots=4).step(torch.from_numpy(codes), [0]).float().numpy()
    np.testing.assert_allclose(np.concatenate([first, rest], axis=1), whole, rtol=0, atol=1e-5)


def test_service_config_resolves_the_plan():
    assert VocoderServiceConfig(device="cuda").resolved_compile_max_row_frames() == 0   # measured: no gain left
    assert VocoderServiceConfig(device="cpu").resolved_compile_max_row_frames() == 0
    assert VocoderServiceConfig(device="cuda", compile_max_row_frames=0).resolved_compile_max_row_frames() == 0
    config = config_from(["--compile-dynamic-frames", "25,16", "--compile-max-row-frames", "2"], {})
    assert config.compile_dynamic_frames == (25, 16) and config.compile_max_row_frames == 2
    with pytest.raises(ValueError, match="compile_max_row_frames must be >= 0"):
        VocoderServiceConfig(compile_max_row_frames=-2)
    with pytest.raises(ValueError, match="compile_dynamic_frames must be positive"):
        VocoderServiceConfig(compile_dynamic_frames=(0,))


def test_cache_dir_points_inductor_and_triton_there(tmp_path, monkeypatch):
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    assert use_cache_dir(tmp_path / "compile") == tmp_path / "compile"
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "compile")
    assert os.environ["TRITON_CACHE_DIR"] == str(tmp_path / "compile" / "triton")
    assert (tmp_path / "compile" / "triton").is_dir()


def test_a_failing_compile_falls_back_to_the_plain_step_once_per_kind(model, caplog):
    """A compiler that cannot run (no C compiler for Triton, an Inductor error) must not stop the
    vocoder: the shapes of that kind are captured with the plain step, the failure is reported and
    logged, and it is not tried again for the next shape of the kind."""
    decoder = StreamingDecoder(model, max_slots=4)
    attempts = []

    def half_broken_compiler(fn, mode, dynamic):
        if dynamic is not False:
            return fn                      # the dynamic kind compiles fine

        def broken(codes, slots, lengths):
            attempts.append(tuple(codes.shape))
            raise RuntimeError("Failed to find C compiler. Please specify via CC environment variable.\nmore")
        return broken

    plan = CompilePlan(decoder.step_unchecked, max_row_frames=2, dynamic_batch_frames=(4,),
                       compiler=half_broken_compiler)
    table = GraphTable(decoder, emulate=True, compile_plan=plan)
    with caplog.at_level("WARNING"):
        report = table.capture([1, 2], [1, 2, 4], BUDGET_BYTES)
    assert attempts == [(1, 16, 1)]                                   # tried once, at the first static shape
    assert report.compile_failed == {"static": "RuntimeError: Failed to find C compiler. Please specify via CC "
                                               "environment variable."}
    assert "static compile of the decode step failed at 1x1" in caplog.text
    for shape in [(1, 1), (1, 2), (2, 1)]:                            # static shapes: the plain step
        assert table.steps[shape].body == decoder.step_unchecked
    assert table.steps[(2, 4)].body.__name__ == "batch_dynamic_step"
    assert {k: v["kind"] for k, v in report.compiled.items()} == {"2x4": "dynamic"}
    codes = random_codes(1, 3, seed=3, codebook_size=model.config.codebook_size).numpy()
    streamed = [table.find(1, 1).run(codes[:, :, i:i + 1], np.array([0]), np.array([1])) for i in range(3)]
    whole = StreamingDecoder(model, max_slots=4).step(torch.from_numpy(codes), [0]).float().numpy()
    np.testing.assert_allclose(np.concatenate(streamed, axis=1), whole, rtol=0, atol=1e-5)


def test_an_unwritable_cache_dir_falls_back_to_the_temp_dir(tmp_path, monkeypatch, caplog):
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with caplog.at_level("WARNING"):
        used = use_cache_dir(blocker / "compile")        # cannot be made: its parent is a file
    assert used == tmp_path / "tmp" / "qwen3-tts-compile" and (used / "triton").is_dir()
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(used)
    assert "cannot be written" in caplog.text
