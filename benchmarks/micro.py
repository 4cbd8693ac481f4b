"""The micro scenario under asv: encode / decode times, bytes and frames on the wire.

asv times exactly the callables the micro scenario times
(``serbench.scenarios.micro.operations``) and counts bytes with the
scenario's own ``wire_bytes``; asv does the sampling and statistics.
"""

from __future__ import annotations

from .common import BACKENDS, PARAM_NAMES, WORKLOADS, get_serializer, get_workload

try:
    from serbench.scenarios.micro import operations, wire_bytes
except ImportError:  # a commit before micro's operations(): the suite is skipped there
    operations = wire_bytes = None
try:
    from serbench.serializers.conformance import case_unsupported, verify
except ImportError:
    try:  # a commit from before serbench's folders by concern
        from serbench.conformance import case_unsupported, verify  # type: ignore[no-redef]
    except ImportError:  # a commit before verified-before-timed: timed unverified, as that commit was
        case_unsupported = verify = None


class Micro:
    params = [BACKENDS, WORKLOADS]
    param_names = PARAM_NAMES
    # Up to 5 samples or 4 s per (backend, workload) and round: in-band
    # backends take seconds per call on images-32, and the grid has 30 cells.
    repeat = (1, 5, 4.0)

    def setup(self, backend: str, workload: str) -> None:
        if operations is None:
            raise NotImplementedError("no serbench.scenarios.micro.operations in this commit")
        self.serializer = get_serializer(backend)
        self.message = get_workload(workload).request(0)
        if verify is not None:
            reason = case_unsupported(self.serializer, workload)
            if reason is not None:
                raise NotImplementedError(f"unsupported by the backend: {reason}")
            verify(self.serializer, [self.message], "request")  # raises: the benchmark fails, untimed
        self.ops = operations(self.serializer, self.message)

    def time_encode(self, backend: str, workload: str) -> None:
        self.ops["encode_s"]()

    def time_decode(self, backend: str, workload: str) -> None:
        self.ops["decode_s"]()

    def track_wire_bytes(self, backend: str, workload: str) -> int:
        return wire_bytes(self.serializer.encode(self.message))

    track_wire_bytes.unit = "bytes"

    def track_frames(self, backend: str, workload: str) -> int:
        return len(self.serializer.encode(self.message))

    track_frames.unit = "frames"
