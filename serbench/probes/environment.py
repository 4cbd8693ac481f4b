"""The environment block of a results file: what produced these numbers.

The accelerator (``accelerator``: torch's CUDA build, each visible GPU and its
link to the host) is probed in a child process: initialising CUDA in the
runner would break every case it forks afterwards.
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

import psutil

import serbench
from serbench.model.errors import CaseFailed
from serbench.model.results import Accelerator, Device, Environment
from serbench.probes import system
from serbench.runtime import lazy, provenance
from serbench.runtime.isolation import run_isolated

torch = lazy.torch(__name__)  # imported on first use (serbench.runtime.lazy)

LIBRARIES = ("torch", "numpy", "msgspec", "pyzmq", "cloudpickle", "psutil", "serbench", "vllm", "sglang")
MODULES = {"pyzmq": "zmq"}  # a distribution whose module has another name
SERBENCH = (
    Path(serbench.__file__).resolve().parent
)  # the commit a result names is that of this code's checkout
MALLOC_PREFIXES = ("MALLOC_", "GLIBC_TUNABLES", "OMP_NUM_THREADS", "OPENBLAS_", "MKL_NUM_THREADS")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


PROBE_TIMEOUT_S = 120.0  # a first CUDA initialisation can take tens of seconds
PCI_DEVICES = Path("/sys/bus/pci/devices")


def host_link(bus_id: str) -> dict[str, str] | None:
    """The PCIe link of the device at ``bus_id`` (``0000:65:00.0``) from sysfs: the speed and width
    it can run at (``max``) and runs at now (``current``; an idle GPU trains its link down)."""
    folder = PCI_DEVICES / bus_id.lower()
    try:
        return {
            which: f"{(folder / f'{which}_link_speed').read_text().strip()} "
            f"x{(folder / f'{which}_link_width').read_text().strip()}"
            for which in ("max", "current")
        }
    except OSError:
        return None


def _probe_accelerator() -> Accelerator:
    """torch's CUDA build and, where CUDA works, each device: name, memory, capability, host link."""
    found = Accelerator(torch_cuda=torch.version.cuda, cuda_available=torch.cuda.is_available())
    for index in range(torch.cuda.device_count() if found.cuda_available else 0):
        props = torch.cuda.get_device_properties(index)
        domain, bus, device = (getattr(props, f"pci_{k}_id", None) for k in ("domain", "bus", "device"))
        bus_id = None if bus is None else f"{domain or 0:04x}:{bus:02x}:{device or 0:02x}.0"
        found.devices.append(
            Device(
                name=props.name,
                memory_bytes=props.total_memory,
                capability=f"{props.major}.{props.minor}",
                pci_bus_id=bus_id,
                host_link=host_link(bus_id) if bus_id else None,
            )
        )
    return found


def accelerator() -> Accelerator:
    """``_probe_accelerator`` in a child process; one with ``error`` set if the probe fails."""
    try:
        return run_isolated(_probe_accelerator, (), PROBE_TIMEOUT_S)
    except CaseFailed as exc:
        return Accelerator(error=f"accelerator probe failed: {exc}")


def collect(argv: list[str], probed: Accelerator | None = None) -> Environment:
    """Versions, CPU, memory, accelerator, commit, command line, allocator settings and the system
    check; ``probed``: the accelerator as another process found it, instead of probing here."""
    return Environment(
        python=platform.python_version(),
        implementation=platform.python_implementation(),
        platform=platform.platform(),
        machine=platform.machine(),
        cpu=_cpu_model(),
        cpu_count=os.cpu_count(),
        memory_bytes=psutil.virtual_memory().total,
        accelerator=probed or accelerator(),
        libraries={name: provenance.version(name, MODULES.get(name)) for name in LIBRARIES},
        git_commit=provenance.checkout_commit(SERBENCH),
        command=[Path(sys.argv[0]).name, *argv],
        allocator_env={k: v for k, v in os.environ.items() if k.startswith(MALLOC_PREFIXES)},
        system=system.check(),
    )
