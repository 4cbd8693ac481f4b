"""Readable units for metric values, shared by the terminal tables, the report and its plots."""

from __future__ import annotations

# Display scales per unit, largest first: the first factor not above the value wins.
SCALES = {
    "s": ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns")),
    "bytes": ((1e9, "GB"), (1e6, "MB"), (1e3, "kB"), (1.0, "B")),
}
UNITLESS = ("", "count", "ratio")
MISSING = "—"


def scale_for(unit: str, value: float) -> tuple[float, str]:
    """Display factor and unit for ``value`` in ``unit``: ``scale_for("s", 0.0138) == (1e-3, "ms")``."""
    steps = SCALES.get(unit)
    if not steps:
        return 1.0, unit
    return next(((f, name) for f, name in steps if abs(value) >= f), steps[-1])


def format_number(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 1e4 else f"{x:.4g}"


def format_value(value: float | None, unit: str) -> str:
    """``value`` in a readable scale with its unit, "—" for None:
    ``format_value(1.38e-05, "s") == "13.8 µs"``."""
    if value is None:
        return MISSING
    factor, shown = scale_for(unit, value)
    return format_number(value / factor) + ("" if shown in UNITLESS else f" {shown}")
