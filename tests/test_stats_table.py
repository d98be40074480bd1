"""The `intervals` table layout: Wilson interval per top-1 (against scipy), seed spread in its own
column, ECE as a metric."""

from __future__ import annotations

import statistics

import pytest

from benchbench.store import results
from benchbench.report.tables import build_table, render

scipy_stats = pytest.importorskip("scipy.stats")


def test_intervals_layout_keeps_wilson_and_seed_spread_apart(make_record):
    cells = [make_record("vit", "d", "scratch", s, acc, eval_images=1000, ece=e)
             for s, acc, e in ((0, 0.81, 0.03), (1, 0.83, 0.05), (2, 0.82, 0.04))]
    cells.append(make_record("bit", "d", "scratch", 0, 0.9, eval_images=1000))
    table = build_table(results.frame(cells), "intervals")
    assert table.headers == ["Model", "Accuracy", "Top-1 (%)", "Wilson 95 % (%)", "Test images", "Seeds",
                             "Seed std (pts)", "ECE (%)"]
    vit, bit = table.rows
    ci = scipy_stats.binomtest(820, 1000).proportion_ci(0.95, method="wilson")
    assert vit[2] == "82.00" and vit[3] == f"[{ci.low * 100:.2f}, {ci.high * 100:.2f}]"
    assert vit[5] == "3" and vit[6] == f"{statistics.stdev([81, 83, 82]):.2f}" and vit[7] == "4.00"
    assert "±" not in " ".join(vit)  # never one merged spread
    ci = scipy_stats.binomtest(900, 1000).proportion_ci(0.95, method="wilson")
    assert bit[3] == f"[{ci.low * 100:.2f}, {ci.high * 100:.2f}]" and bit[6] == "-" and bit[7] == "-"
    assert "Wilson 95 %" in render(table, "markdown")
