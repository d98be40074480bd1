"""The accuracy-vs-cost Pareto frontier, claiming only what the data supports.

A point is dominated only where another point is at least as cheap and significantly better:
- at least as cheap: the other's cost plus its measured spread is at most this one's cost minus its
  spread (exact costs, such as GMACs or exaFLOPs from counted MACs, have no spread: plain <=);
- significantly better: by default, the other's accuracy interval lies wholly above this one's (the
  Wilson 95 % intervals do not overlap: a conservative test), or as a caller's paired test decides.
Every point that no other dominates is on the frontier. Two points that tie, or whose difference is
within noise, are both on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence


@dataclass(frozen=True)
class Point:
    name: str
    cost: float
    accuracy: float
    low: float  # the accuracy's interval
    high: float
    cost_spread: float = 0.0  # the measured spread of the cost (e.g. std of device-days over seeds)


def at_least_as_cheap(a: Point, b: Point) -> bool:
    """Whether `a` is at least as cheap as `b` beyond the costs' measured spreads."""
    return a.cost + a.cost_spread <= b.cost - b.cost_spread


def intervals_apart(a: Point, b: Point) -> bool:
    """Whether `a` is significantly better than `b` by their intervals: a's lies wholly above b's."""
    return a.low > b.high


def dominated_by(points: Sequence[Point],
                 better: Callable[[Point, Point], bool] = intervals_apart) -> list[str | None]:
    """For each point, the name of a point that dominates it (the cheapest such), or None: on the frontier."""
    out: list[str | None] = []
    for p in points:
        rivals = [q for q in points if q is not p and at_least_as_cheap(q, p) and better(q, p)]
        out.append(min(rivals, key=lambda q: q.cost).name if rivals else None)
    return out
