"""What a run and the conformance command print: no third-party warnings, and progress in a log as
plain lines, one per case (subprocesses with every warning shown once; no timings)."""

from __future__ import annotations

from pathlib import Path

from as_user import serbench_command

from serbench.model.results import load


def test_a_run_warns_nothing_and_logs_one_plain_line_per_case(micro_run) -> None:
    assert "Warning" not in micro_run.stdout + micro_run.stderr, micro_run.stderr
    assert "\r" not in micro_run.stderr  # no bar frames in a log
    labels = {record.label for record in load(micro_run.out / "results.json").records}
    assert len(labels) == 4  # two backends × two workloads
    lines = [line for line in micro_run.stderr.splitlines() if line.startswith("[")]
    # a line as each case (each visit of a case measured in rounds) begins, counted against the
    # visits planned: a group found settled skips its later rounds, and the count jumps past them
    total = int(lines[-1][1:].split("/", 1)[0])
    assert lines[-1] == f"[{total}/{total}] done"
    begun = [line.split("] ", 1) for line in lines[:-1]]
    counts = [int(count[1:].split("/")[0]) for count, _ in begun]
    assert all(count.endswith(f"/{total}") for count, _ in begun)
    assert counts == sorted(set(counts)) and counts[0] == 1 and counts[-1] <= total
    assert {label for _, label in begun} == labels


def test_conformance_warns_nothing(tmp_path: Path) -> None:
    # pickle decodes quantized specimens through torch's TypedStorage; msgspec-frombuffer and
    # numpy-intermediate view read-only frames through torch.frombuffer and torch.from_numpy.
    proc = serbench_command("conformance", "pickle", "msgspec-frombuffer", "numpy-intermediate", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Warning" not in proc.stdout + proc.stderr, proc.stderr
    assert "numpy-intermediate" in proc.stdout  # it did check them
