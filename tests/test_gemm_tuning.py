"""kernels/gemm_tuning.py: when a GEMM problem is tuned, what a choice runs, and failures.

CPU: the rules (scope, capture, failures, eligibility) with the timing replaced by a stand-in.
CUDA: the real cuBLASLt path against torch, in place and out of place, eager and captured."""
from __future__ import annotations

import pytest
import torch

from kernels import gemm_tuning, small_m_linear
from kernels.gemm_tuning import Choice, GemmKey

CUDA = torch.cuda.is_available()


@pytest.fixture(autouse=True)
def fresh_table(monkeypatch):
    monkeypatch.delenv(gemm_tuning.ENABLE_ENV, raising=False)
    gemm_tuning.reset()
    yield
    gemm_tuning.reset()


KEY = GemmKey(0, 64, 1024, 512, torch.bfloat16, False)


def fake_tuner(monkeypatch, outcome):
    calls = []

    def tune(key):
        calls.append(key)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    monkeypatch.setattr(gemm_tuning, "_tune", tune)
    return calls


def test_no_tuning_outside_the_scope(monkeypatch):
    calls = fake_tuner(monkeypatch, Choice(torch_us=5.0, chosen_us=5.0))
    assert gemm_tuning._choice(KEY) is None
    assert calls == [] and gemm_tuning.choices() == {}


def test_first_call_in_scope_tunes_once_and_the_choice_holds_outside(monkeypatch):
    chosen = Choice(plan="plan", algo="algo", torch_us=8.0, chosen_us=6.0)
    calls = fake_tuner(monkeypatch, chosen)
    with gemm_tuning.allow_tuning():
        with gemm_tuning.allow_tuning():   # nested scopes
            assert gemm_tuning._choice(KEY) is chosen
        assert gemm_tuning.tuning_allowed()
        assert gemm_tuning._choice(KEY) is chosen
    assert not gemm_tuning.tuning_allowed()
    assert gemm_tuning._choice(KEY) is chosen
    assert calls == [KEY]
    assert gemm_tuning.choices() == {KEY: chosen}


def test_no_tuning_during_a_capture(monkeypatch):
    calls = fake_tuner(monkeypatch, Choice())
    monkeypatch.setattr(gemm_tuning, "_capturing", lambda: True)
    with gemm_tuning.allow_tuning():
        assert gemm_tuning._choice(KEY) is None
    assert calls == []


def test_a_failed_timing_run_leaves_that_problem_on_torch_only(monkeypatch, caplog):
    fake_tuner(monkeypatch, torch.OutOfMemoryError("no room for the weight copies"))
    with gemm_tuning.allow_tuning():
        choice = gemm_tuning._choice(KEY)
    assert choice is not None and choice.algo is None     # torch, and not retried
    assert "not tuned" in caplog.text and "no room" in caplog.text
    assert gemm_tuning.enabled_on(torch.device("cuda"))


def test_a_library_failure_turns_tuning_off(monkeypatch, caplog):
    from kernels.cublaslt import CublasLtError
    fake_tuner(monkeypatch, CublasLtError("libcublasLt not found"))
    with gemm_tuning.allow_tuning():
        assert gemm_tuning._choice(KEY) is None
    assert "GEMM tuning off" in caplog.text
    assert not gemm_tuning.enabled_on(torch.device("cuda"))
    gemm_tuning.reset()
    assert gemm_tuning.enabled_on(torch.device("cuda"))


def test_the_switch_and_the_device(monkeypatch):
    assert gemm_tuning.enabled_on(torch.device("cuda"))
    assert not gemm_tuning.enabled_on(torch.device("cpu"))
    monkeypatch.setenv(gemm_tuning.ENABLE_ENV, "0")
    assert not gemm_tuning.enabled_on(torch.device("cuda"))


def test_cpu_calls_never_take_the_tuned_path(monkeypatch):
    calls = fake_tuner(monkeypatch, Choice(plan="plan", algo="algo"))
    x, w = torch.randn(64, 512).bfloat16(), torch.randn(1024, 512).bfloat16()
    with gemm_tuning.allow_tuning():
        assert gemm_tuning.linear_or_none(x, w) is None
        residual = torch.zeros(64, 1024).bfloat16()
        assert gemm_tuning.add_(residual, x, w) is False
        y = small_m_linear.linear(x, w)
    torch.testing.assert_close(y, torch.nn.functional.linear(x, w))
    assert calls == []


@pytest.mark.parametrize("rows, dtype, ok", [(64, torch.bfloat16, True), (2, torch.bfloat16, False),
                                             (gemm_tuning.MAX_ROWS + 1, torch.bfloat16, False),
                                             (64, torch.float32, False), (64, torch.float16, True)])
def test_eligibility_rules(monkeypatch, rows, dtype, ok):
    monkeypatch.setattr(gemm_tuning, "enabled_on", lambda device: True)
    x, w = torch.zeros(rows, 512, dtype=dtype), torch.zeros(1024, 512, dtype=dtype)
    monkeypatch.setattr(gemm_tuning, "_aligned", lambda *t: True)
    assert gemm_tuning._eligible(x, w) is ok
    assert gemm_tuning._eligible(x[:, :256], w[:, :256]) is False            # not contiguous
    monkeypatch.setattr(gemm_tuning, "_aligned", lambda *t: False)
    assert gemm_tuning._eligible(x, w) is False                              # cuBLASLt's 256-byte assumption


# ---- CUDA: the real library ------------------------------------------------------------------

cuda_only = pytest.mark.skipif(not CUDA, reason="needs CUDA (cuBLASLt)")


@cuda_only
@pytest.mark.parametrize("m, n, k", [(64, 1024, 2048), (256, 4096, 1024), (256, 1024, 3072), (37, 2048, 1024)])
def test_tuned_results_match_torch(m, n, k):
    gen = torch.Generator(device="cuda").manual_seed(m + n + k)
    x = torch.randn(m, k, device="cuda", generator=gen).bfloat16()
    w = (torch.randn(n, k, device="cuda", generator=gen) * k ** -0.5).bfloat16()
    residual = torch.randn(m, n, device="cuda", generator=gen).bfloat16()
    want = torch.nn.functional.linear(x, w)
    want_add = residual.float() + x.float() @ w.float().t()
    with gemm_tuning.allow_tuning():
        y = small_m_linear.linear(x, w)
        r = residual.clone()
        small_m_linear.linear_add_(r, x, w)
    torch.testing.assert_close(y, want, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(r.float(), want_add, rtol=2e-2, atol=3e-2)
    assert {(key.m, key.accumulate) for key in gemm_tuning.choices()} == {(m, False), (m, True)}
    assert gemm_tuning.tuning_seconds > 0
    # outside the scope the choice still answers (same bits: same algorithm, same data)
    again = small_m_linear.linear(x, w)
    assert torch.equal(again, y)


@cuda_only
@pytest.mark.parametrize("accumulate", [False, True])
def test_every_candidate_algorithm_computes_the_product(accumulate):
    """The binding itself, whatever the tuner picks on this card: every heuristic algorithm (and a
    split-K variant) run through MatmulPlan.run, eagerly and captured, gives torch's product."""
    from kernels import cublaslt

    m, n, k = 128, 1024, 2048
    gen = torch.Generator(device="cuda").manual_seed(3)
    x = torch.randn(m, k, device="cuda", generator=gen).bfloat16()
    w = (torch.randn(n, k, device="cuda", generator=gen) * k ** -0.5).bfloat16()
    base = torch.randn(m, n, device="cuda", generator=gen).bfloat16()
    want = (base.float() if accumulate else 0.0) + x.float() @ w.float().t()
    plan = cublaslt.MatmulPlan(m, n, k, torch.bfloat16, accumulate=accumulate)
    candidates = plan.candidates(8)
    assert candidates, "cuBLASLt listed no algorithm"
    split = plan.with_splitk(candidates[0], 2)
    for algo in candidates + ([split] if split is not None else []):
        out = base.clone()
        plan.run(algo, x, w, out)
        torch.testing.assert_close(out.float(), want, rtol=2e-2, atol=3e-2)
        graph = torch.cuda.CUDAGraph()
        captured = base.clone()
        with torch.cuda.graph(graph):
            plan.run(algo, x, w, captured)
        captured.copy_(base)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(captured, out), cublaslt.algo_config(algo)   # same algorithm, same bits


@cuda_only
def test_captured_call_replays_the_choice():
    m, n, k = 128, 2048, 1024
    x = torch.randn(m, k, device="cuda").bfloat16()
    w = (torch.randn(n, k, device="cuda") * k ** -0.5).bfloat16()
    w2 = (torch.randn(n, n, device="cuda") * n ** -0.5).bfloat16()
    residual = torch.randn(m, n, device="cuda").bfloat16()
    from talker_service.engine.graphs import capture_graph

    def step():
        r = residual.clone()
        return small_m_linear.linear_add_(r, small_m_linear.linear(x, w), w2)

    graph, out = capture_graph(step, tune_gemms=True)
    assert len(gemm_tuning.choices()) == 2      # tuned in the warm-up, before the capture
    out.zero_()
    graph.replay()
    torch.cuda.synchronize()
    want = residual.float() + (x.float() @ w.float().t()).bfloat16().float() @ w2.float().t()
    torch.testing.assert_close(out.float(), want, rtol=2e-2, atol=5e-2)


@cuda_only
def test_switched_off_means_torch(monkeypatch):
    monkeypatch.setenv(gemm_tuning.ENABLE_ENV, "0")
    x, w = torch.randn(64, 1024, device="cuda").bfloat16(), torch.randn(1024, 1024, device="cuda").bfloat16()
    with gemm_tuning.allow_tuning():
        assert gemm_tuning.linear_or_none(x, w) is None
    assert gemm_tuning.choices() == {}
