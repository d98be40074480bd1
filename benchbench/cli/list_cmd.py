"""`benchbench list models|datasets|protocols|executors|suites [--json]`."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from tabulate import tabulate

from benchbench.cli.common import catalog
from benchbench.measure.params import cached_params_at_default
from benchbench.suite import find_suite, parse, suite_dirs

PARAMS_CACHE_ENV = "BENCHBENCH_CACHE"
KINDS = ("models", "datasets", "protocols", "executors", "suites")


def add_parser(sub, parent: argparse.ArgumentParser) -> None:
    p = sub.add_parser("list", parents=[parent], help="list registered models, datasets, protocols, executors or suites")
    p.add_argument("kind", choices=KINDS)
    p.add_argument("--json", action="store_true", help="a JSON array of objects")
    p.set_defaults(func=run)


def _rows(kind: str, args) -> list[dict]:
    if kind == "suites":
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
    cat = catalog(args)
    registry = cat.registry(kind)
    rows = []
    if kind == "models":
        cache_dir = Path(os.environ.get(PARAMS_CACHE_ENV, Path.home() / ".cache" / "benchbench"))
        params = cached_params_at_default(registry, cache_dir / "params.json")
    for spec in registry:
        row = {"id": spec.id, "name": spec.name, "plugin": registry.plugin_of[spec.id],
               "aliases": list(spec.aliases)}
        if kind == "models":
            row.update(family=spec.family, default_resolution=spec.default_resolution,
                       params=params[spec.id])
        elif kind == "datasets":
            row.update(num_classes=spec.num_classes, image_size=spec.image_size, in_chans=spec.in_chans,
                       splits=list(spec.splits))
        elif kind == "executors":
            row.update(default=spec.default, extra=spec.extra,
                       options={k: {"default": s.default, "help": s.help} for k, s in spec.options.items()})
        else:
            row["settings"] = {k: {"default": s.default, "help": s.help} for k, s in spec.settings.items()}
        row["description"] = spec.description
        rows.append(row)
    return rows


def run(args) -> int:
    rows = _rows(args.kind, args)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    columns = {"models": ("id", "name", "family", "params", "default_resolution", "plugin"),
               "datasets": ("id", "name", "num_classes", "image_size", "plugin"),
               "protocols": ("id", "name", "plugin", "description"),
               "executors": ("id", "name", "extra", "plugin", "description"),
               "suites": ("id", "description", "path")}[args.kind]
    print(tabulate([[r.get(c, "") for c in columns] for r in rows], headers=columns, tablefmt="simple"))
    return 0
