"""What every cell of a run shares, as one frozen value that travels to any worker (this process, a
Slurm job, a Ray task, the ranks of a cell): where records go, the suite's name and mode, the device
as asked, the data options, the plugins to load, the driver's environment, the executor, the
threads asked for, and the prices per device-hour a cell's cost is computed at.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from benchbench.meters.prices import Price
from benchbench.plugins import Plugins
from benchbench.specs import DataOptions


@dataclass(frozen=True)
class RunContext:
    run_dir: Path
    suite: str
    quick: bool = False
    device: str = "auto"  # as asked (--device): resolved where each cell runs
    data: DataOptions = field(default_factory=DataOptions)
    plugins: Plugins = field(default_factory=Plugins)
    env: Mapping[str, Any] | None = None  # the driver's environment; each record carries its part
    executor: str = ""  # the executor's id
    show_progress: bool = False
    threads: int | None = None  # --threads, for every worker; None: each worker's own budget
    prices: tuple[Price, ...] = ()  # --price, then the suite's [[cost]] (benchbench.meters.prices)
