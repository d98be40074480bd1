"""What the server of isolated cells (benchbench.run.isolated) imports once, so that every cell forked
from it starts with it imported: torch, torchvision (whose datasets, transforms and models plugins
import when a cell first needs them: seconds, torch._dynamo included), the run layer, and the modules
of the installed plugins (entry points of group "benchbench"). Imports only: it registers no plugin, starts no thread and
initialises no CUDA (a process forked after CUDA is initialised cannot use it).

A module that fails to import here is skipped without a word: the cell that needs it loads its plugins
again and reports the failure as any run does.
"""

from __future__ import annotations

import importlib
import importlib.metadata


def _preload() -> None:
    import torch  # noqa: F401 - the seconds a cell would otherwise spend importing

    try:
        import torchvision  # noqa: F401 - as torch
    except Exception:  # noqa: BLE001 - a broken torchvision is the cell's to report
        pass

    import benchbench.run.worker  # noqa: F401
    from benchbench.plugins import GROUP, builtin_entry_points, entry_points_enabled

    installed = list(importlib.metadata.entry_points(group=GROUP))
    for ep in installed if entry_points_enabled() else builtin_entry_points(installed):
        try:
            importlib.import_module(ep.module)
        except Exception:  # noqa: BLE001 - the server must start whatever a plugin does at import
            pass


try:
    _preload()
except Exception:  # noqa: BLE001 - as above: the cells import what is missing themselves
    pass
