"""The one exception the lab raises for a problem the user can fix; the CLI prints it on one line."""

from __future__ import annotations

import os
import socket


class LabError(Exception):
    """A problem with the lab's input or its host, described in one line."""


def require_free_port(port: int, hint: str) -> None:
    """Raise a LabError naming `port` on 127.0.0.1 when something listens there (bound as http.server binds: a port left
    in TIME_WAIT is free), with `hint` saying how to choose another."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as exc:
            raise LabError(f"port {port} on 127.0.0.1 is in use ({os.strerror(exc.errno or 0)}): {hint}") from None
