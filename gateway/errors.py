"""Request failures that carry the gRPC status the client gets."""
from __future__ import annotations

import grpc


class RequestError(Exception):
    """Ends one call with `code` and `message`; never affects other calls."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class InvalidArgument(RequestError):
    """A bad field; the message starts with the field's path, e.g. "config.language: ..."."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(grpc.StatusCode.INVALID_ARGUMENT, f"{field}: {message}")
        self.field = field
