"""``tcp://HOST:PORT`` endpoints, parsed once for every part of serbench that meets another host."""

from __future__ import annotations

from urllib.parse import urlsplit


def tcp_endpoint(url: str, ports: int = 1) -> tuple[str, int]:
    """(HOST as a ZeroMQ endpoint writes it, PORT) of ``tcp://HOST:PORT``, where the caller uses
    ``ports`` ports from PORT on; ValueError says what is wrong. An IPv6 HOST comes back bracketed."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    last = 65537 - ports  # PORT + ports - 1 is at most 65535
    if parts.scheme != "tcp" or not parts.hostname or port is None or not 0 < port < last:
        raise ValueError(f"expected tcp://HOST:PORT with PORT below {last}, got {url!r}")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return host, port
