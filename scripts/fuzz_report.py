"""Per safe backend: how many malformed inputs were tried and how each ended (docs/reliability.md).

    python scripts/fuzz_report.py                  # CI's bound: 1000 inputs per generator
    python scripts/fuzz_report.py --examples 20000 # a soak

Runs the fixed corpus and the three generators of ``serbench.testing.malformed``
(the inputs ``tests/serializers/test_decoder_robustness.py`` uses) against every safe
backend and prints a Markdown table. Generation is derandomized, so the same
code gives the same counts on every run. An input that ends in anything but
``DecodeError`` or a valid decoded object stops the report with exit 1.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the generators live with the tests

from malformed import SAFE_SPECS, Fuzzer, Tally, corpus, examples_per_strategy, judge

from serbench.serializers import get_serializer


def add_corpus(tally: Tally, specs: list[str]) -> None:
    """Judge every fixed-corpus entry of each backend into ``tally``."""
    for spec in specs:
        serializer = get_serializer(spec)
        for frames, type_ in corpus(spec).values():
            tally.add(spec, judge(serializer, frames, type_))


def markdown(tally: Tally, specs: list[str]) -> str:
    rows = [
        "| backend | inputs tried | DecodeError | decoded, valid | anything else |",
        "|---|--:|--:|--:|--:|",
    ]
    for spec in specs:
        counts = tally.counts[spec]
        rows.append(f"| `{spec}` | {tally.tried(spec)} | {counts['DecodeError']} | {counts['decoded']} | 0 |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--examples", type=int, default=examples_per_strategy(), help="inputs per generator")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore", message="The given (buffer|NumPy array) is not writable")
    fuzzer = Fuzzer(SAFE_SPECS, args.examples)
    try:
        fuzzer.run_all()
        add_corpus(fuzzer.tally, SAFE_SPECS)
    except Exception as exc:
        print(f"fuzz_report: an input ended in neither: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(markdown(fuzzer.tally, SAFE_SPECS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
