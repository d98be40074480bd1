"""`benchbench list models|datasets|protocols|executors|reporters|suites [--json]`.

Models, datasets and protocols come from `benchbench.cli.listing`'s cache while the plugin code and
the installed packages are unchanged (no torch import); suites are read from their files.
"""

from __future__ import annotations

import argparse
import json

from benchbench.cli.common import catalog
from benchbench.hookspecs import KINDS as SPEC_KINDS

KINDS = (*SPEC_KINDS, "suites")


def add_parser(sub, parent: argparse.ArgumentParser) -> None:
    p = sub.add_parser("list", parents=[parent],
                       help="list registered models, datasets, protocols, executors, reporters or suites")
    p.add_argument("kind", choices=KINDS)
    p.add_argument("--json", action="store_true", help="a JSON array of objects")
    p.set_defaults(func=run)


def _suite_rows() -> list[dict]:
    from benchbench.plan.suite import find_suite, parse, suite_dirs

    rows, seen = [], set()
    for d in suite_dirs():
        for path in sorted(d.glob("*.toml")):
            if path.stem in seen:
                continue
            seen.add(path.stem)
            head = parse(find_suite(str(path))).get("suite", {})
            rows.append({"id": path.stem, "name": head.get("name", path.stem),
                         "description": head.get("description", ""), "path": str(path)})
    return rows


def _rows(kind: str, args) -> list[dict]:
    if kind == "suites":
        return _suite_rows()
    from benchbench.cli.listing import cached_rows

    return cached_rows(kind, args.plugin, lambda: catalog(args))


def run(args) -> int:
    rows = _rows(args.kind, args)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    from tabulate import tabulate

    columns = {"models": ("id", "name", "family", "params", "default_resolution", "plugin"),
               "datasets": ("id", "name", "num_classes", "image_size", "plugin"),
               "protocols": ("id", "name", "plugin", "description"),
               "executors": ("id", "name", "extra", "plugin", "description"),
               "reporters": ("id", "name", "extra", "plugin", "description"),
               "suites": ("id", "description", "path")}[args.kind]
    # a parametric spec shows how its ids are written ("timm/<arg>", "imagefolder:<arg>")
    shown = [{**r, "id": r.get("parametric") or r["id"]} for r in rows]
    print(tabulate([[r.get(c, "") for c in columns] for r in shown], headers=columns, tablefmt="simple"))
    return 0
