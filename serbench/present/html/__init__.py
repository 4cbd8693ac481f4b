"""The HTML report: one self-contained page for a results file, or for two.

The page opens from disk with no server and no network: styles are inline and
figures are PNGs embedded as data URIs, so ``index.html`` can be mailed or
attached to a CI run on its own (docs/report.md; docs/architecture.md, Report).

* ``render(summary, source)`` — the page of one run's ``analysis.summary.RunSummary``
  (``run_page``);
* ``render_comparison(summary, sources, max_regression)`` — head against base, from
  a ``ComparisonSummary`` (``comparison_page``);
* ``write_page(text, out_dir)`` — ``out_dir/index.html``, written atomically;
* ``write_report(summary, out_dir, source)`` — ``render`` then ``write_page``:
  what ``serbench run`` leaves beside results.json.

The shared HTML pieces are in ``page``, the matplotlib figures in ``plots``.
No command line here: ``serbench report`` is ``serbench.cli.report``'s.
"""

from __future__ import annotations

from serbench.present.html.comparison_page import render_comparison
from serbench.present.html.page import write_page
from serbench.present.html.run_page import render, write_report

__all__ = ["render", "render_comparison", "write_page", "write_report"]
