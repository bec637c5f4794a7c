"""Mapping between the internal `StatusCode` enum and `grpc.StatusCode`.

Internal values 1..16 equal the gRPC code numbers by construction (see common.proto), so the
mapping is by number; `STATUS_CODE_UNSPECIFIED` (never sent) reads as UNKNOWN, and gRPC's OK has
no internal counterpart because success is the absence of an Error.
"""
from __future__ import annotations

import grpc

from protos.tts.internal.v1 import common_pb2

_GRPC_BY_NUMBER = {code.value[0]: code for code in grpc.StatusCode}


def to_grpc(code: int) -> grpc.StatusCode:
    """The gRPC status a request ending with internal `code` returns to its client."""
    if code == common_pb2.STATUS_CODE_UNSPECIFIED or code not in _GRPC_BY_NUMBER:
        return grpc.StatusCode.UNKNOWN
    return _GRPC_BY_NUMBER[code]


def from_grpc(code: grpc.StatusCode) -> int:
    """The internal StatusCode value for a gRPC status (e.g. a client's cancellation)."""
    if code == grpc.StatusCode.OK:
        raise ValueError("grpc.StatusCode.OK has no internal StatusCode: success sends no Error")
    return code.value[0]
