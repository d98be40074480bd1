"""Options and helpers shared by the commands."""

from __future__ import annotations

import argparse
import sys

from benchbench.plugins import Catalog, load_catalog


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
    for failure in cat.failures:
        print(f"warning: {failure} (use --strict-plugins to make this an error)", file=sys.stderr)
    return cat
