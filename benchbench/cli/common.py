"""Options and helpers shared by the commands.

Cheap to import (no torch, pandas or matplotlib): every command module imports this while the
parser is built, also for `benchbench --help`.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from benchbench.plugins import Catalog, load_catalog

if TYPE_CHECKING:
    import pandas as pd


def plugin_options() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("plugins")
    g.add_argument("--plugin", action="append", default=[], metavar="FILE.py",
                   help="load a local plugin file (repeatable)")
    g.add_argument("--strict-plugins", action="store_true",
                   help="fail when a plugin cannot be loaded, instead of reporting and skipping it")
    return p


def catalog(args: argparse.Namespace) -> Catalog:
    """Every plugin loaded; failures reported on stderr (the rest keep working)."""
    cat = load_catalog(args.plugin, strict=args.strict_plugins)
    report_failures(cat)
    return cat


def report_failures(cat: Catalog) -> None:
    for failure in cat.failures:
        print(f"warning: {failure} (use --strict-plugins to make this an error)", file=sys.stderr)


def named_plugins(args: argparse.Namespace) -> Catalog | None:
    """For commands that read only records (which carry names, labels and accuracies): the plugins
    are loaded, and their failures reported, only when the command line names plugin options."""
    return catalog(args) if args.plugin or args.strict_plugins else None


def load_run(run_dir: str) -> "pd.DataFrame":
    """A run's records as a DataFrame (`benchbench.results.load`); unreadable lines are warnings."""
    from benchbench import results

    df = results.load(run_dir)
    for problem in df.attrs["problems"]:
        print(f"warning: {problem}", file=sys.stderr)
    return df
