"""ZeroMQ endpoint syntax, checked where an address enters a process (flags, wire messages)."""
from __future__ import annotations

import re

# tcp://host:port (port may be * when binding), ipc://path, inproc://name
_ENDPOINT = re.compile(r"^(tcp://[^\s:]+:(\d+|\*)|tcp://\[[0-9a-fA-F:.]+\]:(\d+|\*)|ipc://\S+|inproc://\S+)$")


def check_endpoint(endpoint: str, what: str) -> None:
    """ValueError unless `endpoint` looks like a ZeroMQ tcp/ipc/inproc address."""
    if not isinstance(endpoint, str) or not _ENDPOINT.match(endpoint):
        raise ValueError(f"{what} {endpoint!r} is not a ZeroMQ endpoint (tcp://host:port, ipc://path, inproc://name)")
