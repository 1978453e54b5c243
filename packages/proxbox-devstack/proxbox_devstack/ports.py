"""TCP ports: is one free, pick another, does a server answer."""

from __future__ import annotations

import socket

from proxbox_processes import LOCALHOST, free_port


def port_is_free(port: int, host: str = LOCALHOST) -> bool:
    """True when nothing listens on host:port and we could bind it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.5)
        if probe.connect_ex((host, port)) == 0:
            return False
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # Servers bind with SO_REUSEADDR, so connections of a stopped server
        # lingering in TIME_WAIT do not make the port busy for them either.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def choose_port(preferred: int | None, fallback: int, host: str = LOCALHOST) -> int:
    """The preferred port (a previous run's), else the default, else any free port."""
    for candidate in (preferred, fallback):
        if candidate and port_is_free(candidate, host):
            return candidate
    return free_port(host)


def answers(host: str, port: int, timeout: float = 0.5) -> bool:
    """True when something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False
