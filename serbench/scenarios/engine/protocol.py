"""The wire protocol between a frontend and an engine: what both ends share.

Both directions: frame 0 is a small msgpack ``Control`` header (kind,
session, data), decoded by msgspec whatever the backend; the backend's own
frames follow. The empty message is a ping, answered with the empty message.

A frontend opens a session (``start``: backend spec, step time; answered
``ready``), sends ``request``s (an ``ack`` goes back as soon as one asking
for it is decoded: the transfer time of its payload) and closes it with
``end`` (answered ``done``, with how many requests were still running). The
engine streams ``outputs`` while requests run; each ``outputs`` header carries
``sent`` (the engine's ``clock()`` just before it encoded the message) and
``first`` (request id → [decoded, scheduled] for every request whose first
token it holds): with a local engine, the frontend splits TTFT into
ingress, queue and first step, and times each message's way back (egress).
Every request carries the checksum of its payload (``request_checksum``) and,
when the frontend encoded it beforehand, of its frames as encoded
(``frames_checksum``, in ``data["encoded"]``); a mismatch, a failed decode, a
duplicate or a refused session comes back as an ``error`` with a message,
whose ``integrity_fault`` says which side is to blame.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Sequence
from typing import Any

import msgspec
import numpy as np

from serbench.workloads import Workload
from serbench.workloads.tree import payload_checksum

DEFAULT_STEP_S = 0.005  # simulated model time per step when ``start`` names none
MAX_STEP_S = 10.0  # the longest step a ``start`` may ask for

# The clock both ends stamp messages with: CLOCK_MONOTONIC on Linux, one clock for every
# process of a host, so a frontend can subtract an engine's stamps when the engine is local.
clock = time.perf_counter


class Control(msgspec.Struct, array_like=True, omit_defaults=True):
    """Frame 0 of every non-empty message: what it is and which session it belongs to."""

    kind: str
    session: str = ""
    data: dict[str, Any] = {}


_encode_control = msgspec.msgpack.Encoder().encode
_decode_control = msgspec.msgpack.Decoder(Control).decode


def control(kind: str, session: str = "", **data: Any) -> bytes:
    """The encoded header frame of a message."""
    return _encode_control(Control(kind, session, data))


def parse_control(frame: Any) -> Control:
    """Decode a header frame; ValueError (msgspec.DecodeError) if it is not one."""
    return _decode_control(memoryview(frame))


def request_checksum(request: Any, workload: Workload | None = None) -> int:
    """CRC of a request's prompt tokens and of every tensor in it (dtype, shape, bytes); the
    prompt read as ``workload`` reads its requests (``Workload.about``; None: serbench's own)."""
    about = (workload or Workload()).about(request)
    tokens = np.asarray(about.prompt_token_ids, dtype=np.int64)
    return zlib.crc32(tokens.tobytes(), payload_checksum(request))


def frames_checksum(frames: Sequence[Any]) -> int:
    """CRC of a message's backend frames, bytes in order (no control header)."""
    crc = 0
    for frame in frames:
        crc = zlib.crc32(memoryview(frame).cast("B"), crc)
    return crc


def integrity_fault(frames: Sequence[Any], encoded_checksum: int | None) -> str:
    """Why a decoded message differs from the one sent, from its frames as received.

    Frames whose CRC differs from the CRC of the frames as encoded changed
    between encode and decode (a transport or buffer-reuse bug); intact
    frames that decode to something else are a codec bug.
    """
    if encoded_checksum is None:
        return "cause unknown: no checksum of the frames as encoded came with it"
    if frames_checksum(frames) != encoded_checksum:
        return (
            "bytes changed in flight: the frames received differ from the frames encoded "
            "(a transport or buffer-reuse bug: did the sender change a buffer before zmq sent it?)"
        )
    return "codec bug: the frames arrived intact, the decoder made something else of them"
