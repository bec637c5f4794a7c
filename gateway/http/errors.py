"""gRPC statuses -> HTTP statuses and OpenAI-style error bodies, in one table."""
from __future__ import annotations

import re

import grpc
from starlette.responses import JSONResponse

from gateway.http.local_calls import LocalRpcError

# status -> (HTTP status, OpenAI error type)
_HTTP_OF = {
    grpc.StatusCode.INVALID_ARGUMENT: (400, "invalid_request_error"),
    # an unknown registered voice: the request named something that does not exist
    grpc.StatusCode.NOT_FOUND: (400, "invalid_request_error"),
    grpc.StatusCode.FAILED_PRECONDITION: (400, "invalid_request_error"),
    grpc.StatusCode.ALREADY_EXISTS: (409, "invalid_request_error"),
    grpc.StatusCode.RESOURCE_EXHAUSTED: (429, "rate_limit_error"),
    grpc.StatusCode.UNAVAILABLE: (503, "server_error"),
    grpc.StatusCode.DEADLINE_EXCEEDED: (504, "server_error"),
    grpc.StatusCode.CANCELLED: (499, "server_error"),
}
RETRY_AFTER_S = 1  # overload and an unreachable backend are both worth a retry soon
# "config.speaker.name: ..." -> the field the gRPC message names, reported as `param`
_FIELD = re.compile(r"^([a-z_][a-z0-9_.]*): ")


class HttpError(Exception):
    """A request refused before it reached the servicer (bad JSON, unknown format, text too long)."""

    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param = status, message, param


def error_body(message: str, error_type: str, param: str | None, code: str) -> dict:
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}


def http_status_of(code: grpc.StatusCode) -> tuple[int, str]:
    return _HTTP_OF.get(code, (500, "server_error"))


def grpc_error(exc: LocalRpcError) -> tuple[int, dict]:
    """(HTTP status, OpenAI error body) of a gRPC failure; `param` is the field its message names."""
    status, error_type = http_status_of(exc.code())
    message = exc.details() or exc.code().name
    match = _FIELD.match(message)
    return status, error_body(message, error_type, match.group(1) if match else None, exc.code().name.lower())


def http_error(exc: HttpError) -> tuple[int, dict]:
    error_type = "invalid_request_error" if exc.status < 500 else "server_error"
    return exc.status, error_body(exc.message, error_type, exc.param, f"http_{exc.status}")


def grpc_error_response(exc: LocalRpcError) -> JSONResponse:
    status, body = grpc_error(exc)
    headers = {"Retry-After": str(RETRY_AFTER_S)} if status in (429, 503) else None
    return JSONResponse(body, status_code=status, headers=headers)


def http_error_response(exc: HttpError) -> JSONResponse:
    status, body = http_error(exc)
    return JSONResponse(body, status_code=status)
