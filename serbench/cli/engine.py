"""``serbench engine``: the engine side alone, for two-host ipc runs."""

from __future__ import annotations

import argparse
import logging
import sys

import zmq

from serbench.links import transport
from serbench.links.transport import DEFAULT_BIND
from serbench.model.errors import UsageError


def cmd_engine(args: argparse.Namespace) -> int:
    """Bind, serve, exit 0 on SIGINT/SIGTERM."""
    # Here, not at the top: the engine decodes with the backends (torch), which every other
    # command's parser must not pay for.
    from serbench.scenarios.engine.server import serve_forever

    logging.basicConfig(level=logging.INFO, format="serbench engine: %(message)s", stream=sys.stderr)
    try:
        transport.tcp_addresses(args.bind)
        serve_forever(args.bind, args.allow_unsafe_deserialization)
    except ValueError as exc:
        raise UsageError(f"--bind: {exc}") from None
    except zmq.ZMQError as exc:
        raise UsageError(f"cannot bind {args.bind}: {exc}") from None
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``serbench engine``."""
    parser = subparsers.add_parser(
        "engine",
        help="the engine side alone, for two-host ipc runs (serbench run --engine)",
        description="Serve ipc-scenario frontends one after another: requests on PORT, outputs on PORT+1.",
    )
    parser.add_argument(
        "--bind",
        default=DEFAULT_BIND,
        help=f"tcp://HOST:PORT to listen on (default {DEFAULT_BIND}: loopback only)",
    )
    parser.add_argument(
        "--allow-unsafe-deserialization",
        action="store_true",
        help="accept backends that run code from their input (pickle, cloudpickle) on a non-loopback "
        "address, and backends named by dotted path",
    )
    parser.set_defaults(func=cmd_engine)
