"""The engine-device options that the ipc and memory scenarios share, and their check before any case.

``--engine-device cpu|cuda[:N]`` adds the engine's stage after decode
(``serbench.scenarios.engine.staging``): the request counts as ready once its tensors
are on that device. ``--pin none|decode|receive`` says how the bytes get into
pinned memory on the way. Without ``--engine-device`` there is no stage, as
before. ``check`` refuses, before any case runs, what this machine cannot do
(pinning or a CUDA device without CUDA), in one line.
"""

from __future__ import annotations

from serbench.model.errors import CaseFailed, UsageError
from serbench.model.profiles import Profile
from serbench.runtime.isolation import run_isolated
from serbench.scenarios.base import Option
from serbench.scenarios.engine.staging import PIN_MODES, Staging, parse_device, unavailable

PROBE_TIMEOUT_S = 120.0  # a first CUDA initialisation can take tens of seconds

OPTIONS = (
    Option(
        "--engine-device",
        "engine_device",
        parse_device,
        "after decode, the engine stages each request's tensors on this device "
        "(cpu, cuda, cuda:N); TTFT and ingress then run until they are there",
    ),
    Option(
        "--pin",
        "pin",
        str,
        "with --engine-device cuda: copy from where decode left the bytes (none, default), pin each "
        "decoded tensor first (decode), or receive the frames straight into pinned buffers (receive)",
        choices=PIN_MODES,
    ),
)


def staging(profile: Profile) -> Staging | None:
    """The stage the options ask for; None without ``--engine-device``.

    UsageError for ``--pin`` without ``--engine-device``.
    """
    device, pin = profile.options.get("engine_device"), profile.options.get("pin")
    if device is None:
        if pin not in (None, "none"):
            raise UsageError(f"--pin {pin} needs --engine-device cuda[:N]: pinning is for copies to a GPU")
        return None
    return Staging(device, pin or "none")


def check(profile: Profile) -> None:
    """UsageError (one line) if this machine cannot stage as the options ask.

    Asked in a child process: initialising CUDA here would break every case
    forked after it.
    """
    chosen = staging(profile)
    if chosen is None:
        return
    try:
        reason = run_isolated(unavailable, (chosen,), PROBE_TIMEOUT_S)
    except CaseFailed as exc:
        reason = f"could not check --engine-device {chosen.device}: {exc}"
    if reason:
        raise UsageError(reason)
