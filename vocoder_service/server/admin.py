"""The vocoder's gRPC side port: grpc.health.v1, server reflection, and tts.internal.v1.VocoderAdmin.

The servicer only converts protobuf <-> arrays and hands the work to the loop thread through
`AdminBridge`; it never touches the engine itself. Health is NOT_SERVING until the weights are
loaded and the graphs captured (the caller flips it), and again from the start of shutdown.
"""
from __future__ import annotations

import queue
from concurrent import futures

import grpc
import numpy as np

from protos.tts.internal.v1 import admin_pb2, admin_pb2_grpc
from service_common.side_port import SidePortServer
from vocoder_service.engine.engine import NUM_CODE_GROUPS, EngineError
from vocoder_service.server.admin_jobs import AdminBridge, BridgeClosed

ADMIN_SERVICE = admin_pb2.DESCRIPTOR.services_by_name["VocoderAdmin"].full_name
MAX_MESSAGE_BYTES = 64 * 2**20   # a Decode reply of 2048 frames is 15.7 MB of float32 PCM


class VocoderAdminServicer(admin_pb2_grpc.VocoderAdminServicer):
    def __init__(self, bridge: AdminBridge, timeout_s: float, max_frames: int) -> None:
        self.bridge = bridge
        self.timeout_s = timeout_s
        self.max_frames = max_frames
        self.codebook_size = 0       # set by bind_model once the weights are loaded
        self.sample_rate_hz = 0

    def bind_model(self, codebook_size: int, sample_rate_hz: int) -> None:
        self.codebook_size = codebook_size
        self.sample_rate_hz = sample_rate_hz

    def GetStats(self, request: admin_pb2.GetStatsRequest, context) -> admin_pb2.VocoderStats:
        return self._run(context, "stats", request)

    def Decode(self, request: admin_pb2.DecodeRequest, context) -> admin_pb2.DecodeResponse:
        if not self.codebook_size:
            context.abort(grpc.StatusCode.UNAVAILABLE, "the vocoder is still loading its model")
        codes = self._codes(request, context)   # [n, 16] int64
        pcm, decode_ms = self._run(context, "decode", (codes, request.num_context_frames, request.chunk_frames))
        pcm = np.asarray(pcm, dtype="<f4")
        return admin_pb2.DecodeResponse(pcm=pcm.tobytes(), num_samples=len(pcm), sample_rate_hz=self.sample_rate_hz,
                                        decode_ms=decode_ms)

    def _codes(self, request: admin_pb2.DecodeRequest, context) -> np.ndarray:
        n = request.num_frames
        problem = None
        if len(request.codes) != n * NUM_CODE_GROUPS:
            problem = f"codes has {len(request.codes)} values; num_frames {n} x {NUM_CODE_GROUPS} = {n * NUM_CODE_GROUPS}"
        elif n > self.max_frames:
            problem = f"num_frames {n} exceeds the limit of {self.max_frames}"
        elif request.num_context_frames > n:
            problem = f"num_context_frames {request.num_context_frames} > num_frames {n}"
        elif request.chunk_frames > self.max_frames:
            problem = f"chunk_frames {request.chunk_frames} exceeds the limit of {self.max_frames}"
        codes = np.asarray(request.codes, dtype=np.int64).reshape(n, NUM_CODE_GROUPS) if problem is None else None
        if problem is None and codes.size and int(codes.max()) >= self.codebook_size:
            problem = f"codes must be < {self.codebook_size}, got {int(codes.max())}"
        if problem is not None:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        return codes

    def _run(self, context, kind: str, payload):
        if not self.codebook_size:
            context.abort(grpc.StatusCode.UNAVAILABLE, "the vocoder is still loading its model")
        remaining = context.time_remaining()
        timeout_s = self.timeout_s if remaining is None else min(self.timeout_s, remaining)
        try:
            return self.bridge.submit(kind, payload, timeout_s)
        except EngineError as exc:
            context.abort(getattr(grpc.StatusCode, exc.code, grpc.StatusCode.UNKNOWN), exc.message)
        except ValueError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except queue.Full:
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "too many admin calls in flight; retry later")
        except (TimeoutError, futures.TimeoutError):
            context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, f"{kind} did not finish within {timeout_s:.1f} s")
        except BridgeClosed as exc:
            context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))


def side_port(host: str, port: int, servicer: VocoderAdminServicer) -> SidePortServer:
    """The side-port server (not started) with health, reflection and VocoderAdmin."""
    return SidePortServer(host, port, ADMIN_SERVICE, admin_pb2_grpc.add_VocoderAdminServicer_to_server, servicer,
                          thread_name_prefix="vocoder-grpc", max_message_bytes=MAX_MESSAGE_BYTES)
