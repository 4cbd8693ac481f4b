"""``serbench fanout-worker``: the fanout scenario's torch-dist workers on another host (docs/fanout.md)."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading

from serbench.model.errors import UsageError
from serbench.scenarios.base import positive_int


def cmd_fanout_worker(args: argparse.Namespace) -> int:
    """Serve the cases of the core at ``--rendezvous`` one after another; exit 0 on SIGINT/SIGTERM."""
    # Here, not at the top: the workers decode with the backends (torch), which every other
    # command's parser must not pay for.
    from serbench.links import transport
    from serbench.scenarios.fanout import broadcast, remote_work
    from serbench.scenarios.fanout import remote as remote_workers

    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    try:
        address = broadcast.rendezvous_address(args.rendezvous)
    except ValueError as exc:
        raise UsageError(f"--rendezvous: {exc}") from None
    reason = broadcast.unavailable("torch-dist")  # imports torch once, before any worker is forked
    if reason is not None:
        raise UsageError(f"torch-dist: {reason}")
    logging.basicConfig(level=logging.INFO, format="serbench fanout-worker: %(message)s", stream=sys.stderr)
    log = logging.getLogger("serbench.fanout-worker")
    loopback = transport.is_loopback(address)
    if args.allow_unsafe_deserialization and not loopback:
        log.warning("unsafe backends accepted from a non-loopback core: whoever runs it can run code here")
    log.info("serving up to %d worker(s) of the core at %s", args.ranks, address)
    remote_workers.serve(
        address,
        args.ranks,
        lambda case: remote_work(case, args.allow_unsafe_deserialization, loopback),
        stop,
        log.info,
    )
    log.info("stopped")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``serbench fanout-worker``."""
    parser = subparsers.add_parser(
        "fanout-worker",
        help="the fanout scenario's torch-dist workers on another host (serbench run --fanout-rendezvous)",
        description="Run up to RANKS torch-dist workers of each fanout case of the core listening at "
        "--rendezvous, one case after another, until SIGINT/SIGTERM: receive, decode and verify every "
        "step as a forked worker does.",
    )
    parser.add_argument(
        "--rendezvous",
        required=True,
        metavar="tcp://CORE:PORT",
        help="the core's --fanout-rendezvous: its address as this host reaches it (PORT..PORT+2)",
    )
    parser.add_argument(
        "--ranks",
        type=positive_int,
        default=1,
        metavar="N",
        help="workers this host runs at most per case (default 1); a case of more workers takes the "
        "rest from other serbench fanout-workers",
    )
    parser.add_argument(
        "--allow-unsafe-deserialization",
        action="store_true",
        help="accept backends that run code from their input (pickle, cloudpickle) from a non-loopback "
        "core, and backends named by dotted path",
    )
    parser.set_defaults(func=cmd_fanout_worker)
