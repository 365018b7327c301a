"""Host names of the two servers (`infill-lsp engine`, `serve --tcp`): which host only this
machine can reach, and how an IPv6 address is written with and without its brackets.

One definition for both, so that the check that decides whether a server is open to other
machines cannot drift between them.
"""

from __future__ import annotations

import ipaddress


def bare_host(host: str) -> str:
    """`host` without the brackets an IPv6 address is written in beside a port (`[::1]`)."""
    if host.startswith("[") and host.endswith("]"):
        return host[1:-1]
    return host


def is_loopback(host: str) -> bool:
    """Whether `host` names this machine only: `localhost` (in any case), or a loopback address
    (127.0.0.0/8, ::1, bracketed or not). Any other name may resolve to an address others can
    reach."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(bare_host(host)).is_loopback
    except ValueError:
        return False


def host_port(host: str, port: int) -> str:
    """`HOST:PORT`, an IPv6 address in brackets (`[::1]:8012`)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
