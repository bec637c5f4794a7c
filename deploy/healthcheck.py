"""Container health check: ask a service's gRPC side port for `grpc.health.v1` status.

    python healthcheck.py 127.0.0.1:5711 [--service NAME] [--timeout-s 3]

Exit 0 when the service answers SERVING, 1 when it answers anything else or cannot be reached
within the timeout. Compose runs this inside the container (the image installs it as
/opt/qwen3-tts/healthcheck.py); Kubernetes uses its native gRPC probes on the same port instead.
Imports only grpcio + grpcio-health-checking (no torch), so a check costs ~100 ms, not a model load.
"""
from __future__ import annotations

import argparse
import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

EXIT_SERVING, EXIT_UNHEALTHY = 0, 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="healthcheck", description=__doc__.splitlines()[0])
    parser.add_argument("target", help="HOST:PORT of the gRPC side port")
    parser.add_argument("--service", default="", help="health service name; empty = the whole server")
    parser.add_argument("--timeout-s", type=float, default=3.0,
                        help="deadline for connect + call; compose's own timeout should be longer")
    return parser


def check(target: str, service: str, timeout_s: float) -> tuple[int, str]:
    """Returns (exit code, status or error text); never raises for an unreachable peer."""
    with grpc.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout_s,
                               wait_for_ready=True)  # ride out the connect, bounded by timeout_s
        except grpc.RpcError as exc:
            return EXIT_UNHEALTHY, f"{exc.code().name}: {exc.details()}"
    name = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    return (EXIT_SERVING if reply.status == health_pb2.HealthCheckResponse.SERVING else EXIT_UNHEALTHY), name


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.timeout_s <= 0:
        build_parser().error(f"--timeout-s must be > 0, got {args.timeout_s}")
    code, text = check(args.target, args.service, args.timeout_s)
    print(f"{args.target} service={args.service!r}: {text}")
    return code


if __name__ == "__main__":
    sys.exit(main())
