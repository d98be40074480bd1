"""The Pareto frontier's dominance rule on constructed points, and the plot that marks it."""

from __future__ import annotations

from matplotlib.collections import PathCollection

from benchbench.store import results
from benchbench.judge.frontier import Point, dominated_by
from benchbench.report.plots import accuracy_vs_compute


def P(name, cost, acc, half=1.0, spread=0.0):
    return Point(name, cost, acc, acc - half, acc + half, spread)


def test_dominated_only_by_a_cheaper_and_significantly_better_point():
    pts = [P("cheap-good", 1.0, 80.0), P("dear-worse", 2.0, 70.0), P("dear-better", 3.0, 85.0),
           P("dear-close", 4.0, 81.5), P("same-cost-worse", 1.0, 75.0)]
    # dear-close (81.5 +- 1) overlaps cheap-good (80 +- 1): only dear-better, cheaper and above it, dominates it
    assert dominated_by(pts) == [None, "cheap-good", None, "dear-better", "cheap-good"]
    # within noise (intervals overlap: 80 +- 1 and 81.5 +- 1): not dominated even though dearer and lower
    assert dominated_by([P("a", 1.0, 80.0), P("b", 2.0, 79.5)]) == [None, None]
    # a cheaper point that is worse dominates nothing; an equal one ties
    assert dominated_by([P("a", 1.0, 70.0), P("b", 2.0, 80.0)]) == [None, None]
    assert dominated_by([P("a", 1.0, 80.0), P("b", 1.0, 80.0)]) == [None, None]


def test_cost_spread_keeps_a_point_that_may_be_cheaper():
    # measured device-days 1.0 +- 0.3 against 1.2 +- 0.3: not at least as cheap beyond the spread
    assert dominated_by([P("a", 1.0, 90.0, spread=0.3), P("b", 1.2, 70.0, spread=0.3)]) == [None, None]
    assert dominated_by([P("a", 1.0, 90.0, spread=0.05), P("b", 1.2, 70.0, spread=0.05)]) == [None, "a"]


def test_plot_draws_error_bars_and_hollow_dominated_points(make_record):
    cells = [make_record(m, "d", "scratch", 0, acc, eval_images=10_000, pretrain_exaflops=x, family="vit")
             for m, acc, x in (("small", 0.80, 1.0), ("big", 0.90, 2.0), ("waste", 0.70, 3.0))]
    df = results.frame(cells)
    fig = accuracy_vs_compute(df)
    ax = fig.axes[0]
    dots = [c for c in ax.collections if isinstance(c, PathCollection)]
    hollow = [c for c in dots if c.get_facecolors().size == 0]
    assert len(dots) == 3 and len(ax.collections) > 3  # and the error bars
    assert [tuple(c.get_offsets()[0]) for c in hollow] == [(3.0, 70.0)]
    (line,) = [ln for ln in ax.get_lines() if ln.get_linestyle() == "--"]
    assert list(line.get_xdata()) == [1.0, 2.0]


def test_each_contender_is_a_point_of_its_own_named_by_its_name(make_record):
    """Two checkpoints of one model: two points, each labelled by its contender's name, and the frontier
    judges them apart (the cheaper, better one dominates the other)."""
    cells = [make_record("vit", "d", "evaluate", 0, acc, eval_images=10_000, pretrain_exaflops=x, family="vit",
                         settings={"init": f"w/{name}.safetensors"})
             for name, acc, x in (("a", 0.90, 1.0), ("b", 0.70, 2.0))]
    fig = accuracy_vs_compute(results.frame(cells))
    ax = fig.axes[0]
    labels = sorted(c.get_text() for c in ax.get_children() if type(c).__name__ == "Annotation")
    assert labels == ["vit@a", "vit@b"]
    hollow = [c for c in ax.collections if isinstance(c, PathCollection) and c.get_facecolors().size == 0]
    assert [tuple(c.get_offsets()[0]) for c in hollow] == [(2.0, 70.0)]
