"""Start-up failures of real processes (loopback, tiny checkpoint, CPU): a taken gRPC port or a
model that does not exist is one line on stderr and a non-zero exit, fast, never a traceback; the
launcher stops with the failing child's line instead of printing "stack ready"; no gRPC server of
the project shares its port through SO_REUSEPORT."""
from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from process_support import LauncherProcess, ServiceProcess, dead_port
from service_common.startup import EXIT_STARTUP_ERROR

pytestmark = pytest.mark.timeout(300)
READY_S = 100.0


def run_module(module: str, *args: str, timeout_s: float = 120.0) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=timeout_s)


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ": error: " in line]


def assert_one_line_error(result: subprocess.CompletedProcess, prog: str, *fragments: str) -> None:
    assert result.returncode == EXIT_STARTUP_ERROR, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    lines = error_lines(result.stderr)
    assert len(lines) == 1 and lines[0].startswith(f"python -m {prog}: error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], result.stderr


def gateway_args(port: int, talker_port: int) -> list[str]:
    return ["--model", "tiny", "--talkers", f"tcp://127.0.0.1:{talker_port}", "--grpc-host", "127.0.0.1",
            "--grpc-port", str(port), "--metrics-port", "-1"]


def test_a_second_gateway_on_a_taken_port_fails_fast_with_one_line(tmp_path):
    with dead_port() as talker_port:
        first = ServiceProcess(tmp_path, "gateway", "gateway", gateway_args(0, talker_port))
        try:
            port = first.wait_ready(READY_S)["grpc_port"]
            # SO_REUSEPORT is off: not even a socket that asks for it may share the port
            with socket.socket() as sharer:
                sharer.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
                with pytest.raises(OSError):
                    sharer.bind(("127.0.0.1", port))
            second = run_module("gateway", *gateway_args(port, talker_port))
            assert_one_line_error(second, "gateway", f"127.0.0.1:{port}", "in use")
            assert first.child.is_alive()
        except BaseException:
            print(first.log_tail())
            raise
        finally:
            first.kill()


def test_a_taken_audio_endpoint_is_one_line(tmp_path):
    with dead_port() as talker_port, socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        audio = f"tcp://127.0.0.1:{holder.getsockname()[1]}"
        result = run_module("gateway", *gateway_args(0, talker_port), "--audio-bind", audio)
        assert_one_line_error(result, "gateway", audio, "could not be bound")


def test_a_taken_metrics_port_is_one_line():
    with dead_port() as talker_port, socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        args = gateway_args(0, talker_port)[:-2] + ["--metrics-port", str(port)]
        result = run_module("gateway", *args)
        assert_one_line_error(result, "gateway", f"metrics port 127.0.0.1:{port} could not be bound")


def test_the_launcher_reports_a_model_that_does_not_exist_in_one_line(tmp_path):
    result = run_module("launcher", "--model", "/nonexistent/qwen3-tts", "--work-dir", str(tmp_path))
    assert_one_line_error(result, "launcher", "'/nonexistent/qwen3-tts' not found")


@pytest.mark.parametrize("module, extra", [("talker_service", ["--vocoders", "tcp://127.0.0.1:1"]),
                                           ("vocoder_service", [])])
def test_a_model_that_does_not_exist_is_one_line(module, extra):
    result = run_module(module, "--model", "/nonexistent/qwen3-tts", "--device", "cpu", "--grpc-port", "0",
                        "--bind", "tcp://127.0.0.1:*", *extra)
    assert_one_line_error(result, module, "'/nonexistent/qwen3-tts' not found")


@pytest.mark.parametrize("module, extra", [("talker_service", ["--vocoders", "tcp://127.0.0.1:1"]),
                                           ("vocoder_service", [])])
def test_a_taken_backend_metrics_port_is_one_line_before_the_model_loads(module, extra):
    # the model does not exist either: the port is what is reported, so it was bound first
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = run_module(module, "--model", "/nonexistent/qwen3-tts", "--device", "cpu", "--grpc-port", "0",
                            "--bind", "tcp://127.0.0.1:*", "--metrics-port", str(port), *extra)
        assert_one_line_error(result, module, f"metrics port 127.0.0.1:{port} could not be bound")


def test_a_taken_side_port_is_one_line():
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = run_module("vocoder_service", "--model", "tiny", "--device", "cpu", "--grpc-host", "127.0.0.1",
                            "--grpc-port", str(port), "--bind", "tcp://127.0.0.1:*")
        assert_one_line_error(result, "vocoder_service", f"gRPC side port 127.0.0.1:{port}", "in use")


def test_the_launcher_stops_with_the_childs_line_when_the_gateway_port_is_taken(tmp_path):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        launcher = LauncherProcess(tmp_path, ["--grpc-port", str(port), "--metrics-port", "-1",
                                              "--health-timeout-s", "90", "--vocoder-arg=--cpu-threads=1",
                                              "--talker-arg=--cpu-threads=1"])
        try:
            code = launcher.proc.wait(timeout=150)
            log = launcher.log_tail(200_000)
            assert code == EXIT_STARTUP_ERROR, log
            assert "stack ready" not in log and "Traceback" not in log, log
            lines = error_lines(log)
            assert lines[-1] == (f"python -m launcher: error: gateway could not start: python -m gateway: error: "
                                 f"gateway gRPC port 127.0.0.1:{port} could not be bound: it is in use by another "
                                 "process"), log
        finally:
            launcher.kill()
