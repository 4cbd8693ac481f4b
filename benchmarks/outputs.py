"""The output path and the size sweep under asv: per-step decode at batch, latency against size.

Two grids of their own (not the default backend × workload grid, which stays
the default matrix's): ``Steps`` times the engine's encode and the frontend's
decode of one ``outputs-B`` step with top-5 logprobs in both layouts, and
tracks the ipc output path's decode CPU per step; ``Sizes`` times encode and
decode of a ``tensor-N`` request across the sweep and counts its
out-of-band frames (``SERBENCH_ASV_STEPS`` / ``SERBENCH_ASV_SIZES`` narrow
them, as common's variables do the default grid). The callables are micro's own
(``serbench.scenarios.micro.operations``), so asv times what the scenario times.
"""

from __future__ import annotations

from .common import BACKENDS, ScenarioTracks, get_serializer, get_workload, grid, measure_grid

try:
    from serbench.scenarios.micro import operations
    from serbench.workloads.sizes import SIZES
except ImportError:  # a commit before the output workloads and the sweep: skipped there
    operations, SIZES = None, ()

# SERBENCH_ASV_STEPS / SERBENCH_ASV_SIZES (specs separated by spaces) narrow these grids.
STEPS = grid(
    "SERBENCH_ASV_STEPS",
    [f"outputs-{b}:logprobs=5,layout={layout}" for b in (64, 1024) for layout in ("nested", "flat")],
)
SWEEP = grid("SERBENCH_ASV_SIZES", [f"tensor-{n}" for n in SIZES if n <= 4 << 20])  # 64 MiB: s per call


class _Timed:
    """encode / decode of one workload message, as micro times them."""

    param_names = ["backend", "workload"]
    repeat = (1, 5, 4.0)

    def setup(self, backend: str, workload: str) -> None:
        if operations is None:
            raise NotImplementedError("no output workloads / size sweep in this commit")
        self.ops = operations(get_serializer(backend), get_workload(workload).message(0))

    def time_encode(self, backend: str, workload: str) -> None:
        self.ops["encode_s"]()

    def time_decode(self, backend: str, workload: str) -> None:
        self.ops["decode_s"]()


class Steps(_Timed):
    params = [BACKENDS, STEPS]


class Sizes(_Timed):
    params = [BACKENDS, SWEEP]

    def track_oob_frames(self, backend: str, workload: str) -> int:
        return len(get_serializer(backend).encode(get_workload(workload).message(0))) - 1

    track_oob_frames.unit = "frames"


class OutputPath(ScenarioTracks):
    """The ipc output path's median decode CPU per step, per backend and step workload."""

    scenario = "ipc"
    params = [BACKENDS, STEPS]

    def setup_cache(self) -> dict:
        # Empty (every benchmark skipped) in a commit without the output workloads.
        return measure_grid(self.scenario, STEPS) if operations is not None else {}

    setup_cache.timeout = 3600

    def track_step_decode(self, cache: dict, backend: str, workload: str) -> float:
        return self.median(cache, backend, workload, "step_decode_s")

    track_step_decode.unit = "seconds"
