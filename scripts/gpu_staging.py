"""On a GPU machine: what the device stage costs TTFT, per serializer × transport × staging.

For each transport and round, a worker (``python -m serbench.runner.measurer``) per staging — no device
(the reference: the request is ready once decoded), and ``--engine-device
cuda`` with each ``--pin`` — measures the ipc scenario on the same cases,
case by case, alternating the order (``serbench.gate.rounds.fresh_rounds``, as the
gate alternates base and head). Then each staging's TTFT (to device-ready)
is compared with the reference's (``serbench.analysis.compare``: ratio of medians,
bootstrap 95 % CI) and a table says which combinations stay within
``--target`` (1.3× by default, the issue's bar)::

    python scripts/gpu_staging.py --out reports/gpu-staging
    python scripts/gpu_staging.py --out reports/gpu-staging --rounds 4 --transports ipc
    python scripts/gpu_staging.py --analyze reports/gpu-staging         # the table again from stored runs

Everything lands in ``--out``: each side's merged results (``<side>.json``, rewritten
after every round, so a stopped run keeps its complete rounds), the raw rounds, the
workers' logs and ``staging.md`` (the table). How long it takes: docs/measurements/2026-12-04-gpu-staging.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from serbench import cli as commands
from serbench.analysis import verdicts
from serbench.cli import options
from serbench.gate.revision import Revision
from serbench.gate.rounds import fresh_rounds
from serbench.model import results

REPO = Path(__file__).resolve().parent.parent
REFERENCE = "host"  # the side without a device stage
PINS = ("none", "decode", "receive")


def sides(transports: list[str], pins: list[str], device: str, run_args: list[str]) -> list[Revision]:
    """One worker per transport × staging, the reference first: ``serbench run``'s own options
    make each side's plan and profile."""
    parser = commands.build_parser()
    made = []
    for transport in transports:
        common = ["run", *run_args, "--transport", transport]
        stagings = [(REFERENCE, [])] + [(pin, ["--engine-device", device, "--pin", pin]) for pin in pins]
        for label, extra in stagings:
            args = parser.parse_args([*common, *extra])
            plan, profile = options.plan(args), options.profile(args)
            made.append(Revision(f"{transport}-{label}", REPO, plan, profile))
    return made


def measure(out: Path, revisions: list[Revision], rounds: int) -> None:
    """Every side's cases, interleaved case by case; merged results in ``out/<label>.json``,
    rewritten after every round: a run stopped in round k keeps rounds 1..k-1 for ``--analyze``
    (a GPU lease can end mid-run)."""
    out.mkdir(parents=True, exist_ok=True)

    def save(runs: list[list[results.Results]]) -> None:
        for revision, side_runs in zip(revisions, runs, strict=True):
            results.save(out / f"{revision.label}.json", results.merge(side_runs))

    fresh_rounds(revisions, rounds, out, log=print, on_round=save)


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value * 1e3:.1f}"


def table(out: Path, target: float) -> list[str]:
    """Markdown rows: every staging's TTFT against the reference's, same transport and backend."""
    lines = [
        f"TTFT to device-ready against the same run's TTFT without the device step (target ≤ {target:g}×);",
        "ratio = median of the per-round ratios (rounds paired A B / B A), bootstrap 95 % CI;",
        "within: yes = the whole interval is within the target, likely = the estimate is.",
        "",
        "| backend | transport | staging | TTFT no device ms (n) | TTFT device-ready ms (n) "
        "| ratio [95 % CI] | to_device ms | within |",
        "|---|---|---|---|---|---|---|---|",
    ]
    best: dict[tuple[str, str], tuple[float, str]] = {}
    for path in sorted(out.glob(f"*-{REFERENCE}.json")):
        transport = path.name.removesuffix(f"-{REFERENCE}.json")
        base = results.load(path)
        for pin in PINS:
            head_path = out / f"{transport}-{pin}.json"
            if not head_path.exists():
                continue
            head = results.load(head_path)
            base_records, head_records = base.by_case(), head.by_case()
            for row in verdicts.compare(base, head).rows:
                backend = row.case.backend
                if row.metric == verdicts.CASE_METRIC:
                    lines.append(f"| {backend} | {transport} | pin {pin} | | | {row.verdict} | | no |")
                if row.metric != "ttft_s":
                    continue
                n_base = base_records[row.case].metrics["ttft_s"].n
                n_head = head_records[row.case].metrics["ttft_s"].n
                stage = head_records[row.case].metrics.get("to_device_s")
                to_device = stage.median if stage else None
                lines.append(
                    f"| {backend} | {transport} | pin {pin} | {_ms(row.base_median)} ({n_base}) "
                    f"| {_ms(row.head_median)} ({n_head}) "
                    f"| {_ratio(row)} | {_ms(to_device)} | {_within(row, target)} |"
                )
                key = (backend, transport)
                if row.ratio is not None and row.ratio < best.get(key, (float("inf"), ""))[0]:
                    best[key] = (row.ratio, pin)
    lines += ["", "Best staging per backend × transport:", ""]
    for (backend, transport), (ratio, pin) in sorted(best.items()):
        verdict = "within" if ratio <= target else "over"
        lines.append(f"* {backend} over {transport}: pin {pin}, {ratio:.2f}× ({verdict})")
    return lines


def _ratio(row: verdicts.MetricComparison) -> str:
    if row.ratio is None:
        return "—"
    interval = "" if row.ci_low is None else f" [{row.ci_low:.2f}, {row.ci_high:.2f}]"
    return f"{row.ratio:.2f}{interval}"


def _within(row: verdicts.MetricComparison, target: float) -> str:
    """yes: the whole interval is within the target; likely: the estimate is; no: it is not."""
    if row.ratio is None or row.ratio > target:
        return "no"
    return "yes" if row.ci_high is not None and row.ci_high <= target else "likely"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the runs and staging.md")
    parser.add_argument("--analyze", action="store_true", help="only print the table of the runs in --out")
    parser.add_argument("--workload", default="images-32")
    parser.add_argument("--backends", default="msgspec-frombuffer,numpy-intermediate,pickle")
    parser.add_argument("--transports", default="ipc,tcp")
    parser.add_argument("--pins", default=",".join(PINS))
    parser.add_argument("--device", default="cuda", help="the engine device of the staged sides")
    parser.add_argument("--num-prompts", type=int, default=5, help="requests per case and round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--target", type=float, default=1.3, help="the ratio a staging must stay within")
    args = parser.parse_args(argv)
    if not args.analyze:
        run_args = [
            "--scenarios", "ipc", "--workloads", args.workload, "--backends", args.backends,
            "--num-prompts", str(args.num_prompts),
        ]  # fmt: skip
        revisions = sides(args.transports.split(","), args.pins.split(","), args.device, run_args)
        measure(args.out, revisions, args.rounds)
        (args.out / "settings.json").write_text(json.dumps(vars(args), default=str, indent=1))
    lines = table(args.out, args.target)
    (args.out / "staging.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
