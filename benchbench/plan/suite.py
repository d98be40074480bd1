"""Suite files (TOML): validated, then expanded into Cells (model x dataset x protocol x seed).

    [suite]
    name = "quickstart"              # optional; the file's stem otherwise
    description = "..."
    table = "models"                 # optional: the layout printed at the end (models | compute)
    models = ["bit-r20x1-small", "vit-mu7"]
    datasets = ["fashion-mnist"]
    protocols = ["scratch"]
    seeds = [0]                      # optional; [0] otherwise
    cell_time_limit_s = 3600         # optional: a cell running longer is stopped, recorded as failed

    [settings.scratch]               # per-protocol settings; see `benchbench list protocols --json`
    epochs = 1

    [sweep.scratch]                  # optional: lists of setting values; a cell per combination
    train_subset = [1000, 60000]

    [[group]]                        # optional, repeatable: another matrix, inheriting the above
    models = ["vit-l16"]
    settings.scratch = { epochs = 2 }

    [[override]]                     # optional, repeatable: settings for the cells it matches
    models = ["vit-mu7"]             # match lists (models, datasets, protocols, seeds); absent = any
    settings.scratch = { lr = 1e-3 }

    [quick]                          # --quick: overrides any list, setting and sweep, in every matrix
    [quick.settings.scratch]
    steps = 20

    [executor]                       # optional: where cells run (--executor and friends override it)
    name = "slurm"
    max_parallel = 8
    [executor.slurm]                 # options of one executor; see docs/cluster.md
    partition = "gpu"

    [contenders]                     # optional: a name per model with its weights (benchbench.plan.contenders)
    in21k = { model = "vit-b16", init = "hf-hub:timm/vit_base_patch16_224.augreg2_in21k_ft_in1k" }

    [[cost]]                         # optional, repeatable: a price per device-hour (benchbench.meters.prices)
    device = "H100"                  # a part of the device's name, or cpu / cuda
    usd_per_hour = 2.49
    source = "where the price comes from"
"""

from __future__ import annotations

import json
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from benchbench.choices import TABLE_LAYOUTS
from benchbench.errors import BenchError, UnknownIdError, did_you_mean, unknown_message
from benchbench.plugins import Catalog
from benchbench.meters.prices import Price, from_suite
from benchbench.plan import contenders
from benchbench.plan.cell import Cell, check_roles, make_cell
from benchbench.settings import check_value, resolve, shown_value
from benchbench.specs import ExecutorSpec, Setting, input_shape

SUITE_KEYS = ("name", "description", "table", "models", "datasets", "protocols", "seeds", "cell_time_limit_s")
LIST_KEYS = ("models", "datasets", "protocols", "seeds")
TOP_KEYS = ("suite", "settings", "sweep", "group", "override", "quick", "executor", "cost", "contenders")
GROUP_KEYS = ("name", "models", "datasets", "protocols", "seeds", "settings", "sweep")
OVERRIDE_KEYS = ("models", "datasets", "protocols", "seeds", "settings")
QUICK_KEYS = ("models", "datasets", "seeds", "settings", "sweep")
REPO_SUITES = Path(__file__).resolve().parents[2] / "suites"
MAX_SUITE_BYTES = 1024 * 1024  # a suite is a page of settings; a bigger file is a mistake
MAX_CELLS = 100_000  # per matrix; a sweep beyond this is a typo, not a plan
SEED_MAX = 2**32 - 1  # seeds seed torch, NumPy and Python; NumPy's legacy generator takes 32 bits
NAME_MAX = 100  # characters of a suite name, which becomes a folder name (at most 255 bytes)


class SuiteError(BenchError):
    pass


@dataclass(frozen=True)
class Suite:
    name: str
    description: str
    path: Path
    quick: bool
    cells: tuple[Cell, ...] = field(default=())
    table: str = "models"  # the layout printed at the end of a run
    # [executor], validated: {"name": id | None, "max_parallel": int (if given), "options": {id: {...}}}
    executor: Mapping[str, Any] = field(default_factory=dict)
    prices: tuple[Price, ...] = ()  # [[cost]]: prices per device-hour (benchbench.meters.prices)
    notes: tuple[str, ...] = ()  # what the dry run says of the suite (cells two of its parts both make)


def suite_dirs() -> list[Path]:
    return list(dict.fromkeys([(Path.cwd() / "suites").resolve(), REPO_SUITES]))


def find_suite(name_or_path: str) -> Path:
    """A suite file from a path, or from a name of a file in suites/ (cwd first, then the repo's)."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    stem = path.name[:-5] if path.name.endswith(".toml") else path.name
    known = {}
    for d in suite_dirs():
        if (d / f"{stem}.toml").is_file():
            return d / f"{stem}.toml"
        known.update({p.stem: p for p in sorted(d.glob("*.toml"))})
    raise SuiteError(unknown_message("suite", name_or_path, known) + "\n  (a suite is a path to a .toml file "
                     f"or the name of one in {' or '.join(str(d) for d in suite_dirs())})")


def _check_keys(table: Mapping[str, Any], allowed: tuple[str, ...], where: str) -> None:
    for key in table:
        if key not in allowed:
            hint = did_you_mean(key, allowed)
            raise SuiteError(f"{where}: unknown key {key!r}" + (f"; did you mean {hint!r}?" if hint else "")
                             + f"\n  allowed: {', '.join(allowed)}")


def _table(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise SuiteError(f"{where}: expected a table ([...] section), got {type(value).__name__}")
    return value


def _list(value: Any, where: str, item: type) -> list:
    if not isinstance(value, list) or not value:
        raise SuiteError(f"{where}: expected a non-empty list, got {value!r}")
    for i, v in enumerate(value):
        if not isinstance(v, item) or isinstance(v, bool):
            raise SuiteError(f"{where}[{i}]: expected {item.__name__}, got {type(v).__name__} {v!r}")
    return value


def parse(path: Path) -> dict[str, Any]:
    try:
        size = path.stat().st_size
        if size > MAX_SUITE_BYTES:
            raise SuiteError(f"{path}: {size:,} bytes, larger than the {MAX_SUITE_BYTES:,} a suite file may be; "
                             "is it the right file?")
        data = path.read_bytes()
    except OSError as exc:
        raise SuiteError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SuiteError(f"{path}: not UTF-8 text (byte {exc.start + 1} is {data[exc.start:exc.start + 1]!r}); "
                         "TOML files are UTF-8: save it as UTF-8") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SuiteError(f"{path}: not valid TOML: {exc}") from None
    except RecursionError:
        raise SuiteError(f"{path}: not valid TOML for benchbench: nested too deeply") from None
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        raise SuiteError(f"{path}: not valid TOML: {str(exc).split(';')[0]}") from None


def check_name(name: Any, where: str, from_file: bool) -> str:
    """A suite name that is one plain folder name under the results root; SuiteError otherwise."""
    if not isinstance(name, str) or not name.strip():
        problem = "must be a non-empty string"
    elif len(name) > NAME_MAX or len(name.encode()) > 2 * NAME_MAX:
        problem = f"is {len(name)} characters long; at most {NAME_MAX}"
    elif "/" in name or "\\" in name:
        problem = "must not contain '/' or '\\'"
    elif name[0] in ".-" or name != name.strip():
        problem = "must not start with '.' or '-', nor start or end with spaces"
    elif not name.isprintable():
        problem = "must not contain control or invisible formatting characters"
    else:
        return name
    shown = repr(name[:40] + "..." if isinstance(name, str) and len(name) > 40 else name)
    source = " (the file's name: [suite] sets none)" if from_file else ""
    raise SuiteError(f"{where}: [suite].name = {shown}{source} {problem}: it becomes a folder name under the results "
                     "root; use letters, digits, '-', '_' and '.'")


def _resolve_ids(values: Any, key: str, where: str, catalog: Catalog) -> list:
    values = _list(values, where, int if key == "seeds" else str)
    if key == "seeds":
        for i, seed in enumerate(values):
            if not 0 <= seed <= SEED_MAX:
                raise SuiteError(f"{where}[{i}]: seed {shown_value(seed)} is outside 0..{SEED_MAX} (a seed seeds torch, "
                                 "NumPy and Python's generators; NumPy takes 32 bits, and seeds outside would collide)")
        return values
    registry = catalog.registry(key)
    ids = []
    for i, v in enumerate(values):
        try:
            ids.append(registry.resolve(v))
        except UnknownIdError as exc:
            raise SuiteError(f"{where}[{i}]: {exc}{plugin_hint(v, registry.kind, where, catalog)}") from None
        except BenchError as exc:  # a parametric id whose argument is wrong
            raise SuiteError(f"{where}[{i}]: {exc}") from None
    return ids


def plugin_hint(name: str, kind: str, where: str, catalog: Catalog) -> str:
    """What to add to an unknown id's message: the --plugin file beside the suite (or in the current
    folder) that registers `name` and is not loaded, if one names it; else how a plugin file's id is
    used."""
    folders = dict.fromkeys([Path(where.split(": ")[0]).parent.resolve(), Path.cwd().resolve()])
    loaded = {str(Path(f).resolve()) for f in catalog.local_files()}
    quoted = (f'"{name}"', f"'{name}'")
    for folder in folders:
        for path in sorted(folder.glob("*.py")):
            try:
                text = path.read_text(errors="replace") if path.stat().st_size < MAX_SUITE_BYTES else ""
            except OSError:
                continue
            if str(path.resolve()) not in loaded and "hookimpl" in text and any(q in text for q in quoted):
                shown = path.relative_to(Path.cwd().resolve()) if path.is_relative_to(Path.cwd().resolve()) else path
                return f"\n  {shown} registers it: add --plugin {shown}"
    return f"\n  (a {kind} that a plugin file registers needs --plugin FILE.py on the command line)"


def _settings_tables(settings: Any, where: str, section: str, catalog: Catalog) -> dict[str, dict]:
    """{protocol id: {setting: value}} from the `section` table (e.g. "settings"); ids resolved."""
    out: dict[str, dict] = {}
    for proto, over in _table(settings, f"{where}: [{section}]").items():
        if proto not in catalog.protocols:
            raise SuiteError(f"{where}: [{section}.{proto}]: "
                             + unknown_message("protocol id", proto, catalog.protocols.specs))
        out.setdefault(catalog.protocols.resolve(proto), {}).update(_table(over, f"{where}: [{section}.{proto}]"))
    return out


@dataclass(frozen=True)
class Override:
    """Settings for the cells whose model, dataset, protocol and seed are in its lists (absent: any)."""

    match: Mapping[str, frozenset]
    settings: Mapping[str, Mapping[str, Any]]

    def applies(self, cell: Mapping[str, Any]) -> bool:
        return all(cell[k] in allowed for k, allowed in self.match.items())


def _overrides(doc: Any, where: str, catalog: Catalog) -> list[Override]:
    if not isinstance(doc, list) or not all(isinstance(o, Mapping) for o in doc):
        raise SuiteError(f"{where}: [[override]] must be an array of tables ([[override]] sections)")
    out = []
    for n, o in enumerate(doc, start=1):
        label = f"[[override]] #{n}"
        _check_keys(o, OVERRIDE_KEYS, f"{where}: {label}")
        if "settings" not in o:
            raise SuiteError(f"{where}: {label}: has no settings (e.g. settings.<protocol> = {{ lr = 1e-3 }}; "
                             f"protocols: {', '.join(p.id for p in catalog.protocols)})")
        match = {k: frozenset(_resolve_ids(o[k], k, f"{where}: {label}.{k}", catalog))
                 for k in LIST_KEYS if k in o}
        settings = _settings_tables(o["settings"], where, f"override.{n}.settings", catalog)
        for proto, given in settings.items():  # keys and types checked here, where the error can point
            _resolve_settings(catalog, proto, given, f"{where}: {label}.settings.{proto}")
        out.append(Override({k[:-1]: v for k, v in match.items()}, settings))
    return out


def _sweep_tables(doc: Any, where: str, section: str, catalog: Catalog) -> dict[str, dict[str, list]]:
    out = _settings_tables(doc, where, section, catalog)
    for proto, values in out.items():
        for key, value in values.items():
            if not isinstance(value, list) or not value:
                raise SuiteError(f"{where}: [{section}.{proto}].{key}: expected a non-empty list of values "
                                 f"(one cell per value), got {value!r}")
    return out


def _combinations(sweep: Mapping[str, list]) -> list[dict[str, Any]]:
    combos: list[dict[str, Any]] = [{}]
    for key, values in sweep.items():
        combos = [{**c, key: v} for c in combos for v in values]
    return combos


def _resolve_settings(catalog: Catalog, proto_id: str, given: Mapping[str, Any], where: str) -> dict[str, Any]:
    try:
        return resolve(catalog.protocols.get(proto_id), given, where)
    except BenchError as exc:
        raise SuiteError(str(exc)) from None


def _check_resolution(cell: Cell, where: str, catalog: Catalog) -> None:
    model, dataset = catalog.models.get(cell.model), catalog.datasets.get(cell.dataset)
    size, step = input_shape(cell.choices.resolution, model, dataset)["image_size"], model.resolution_multiple
    if size % step:
        lower, upper = size - size % step, size - size % step + step
        name = catalog.protocols.get(cell.protocol).roles.resolution
        source = f"its `{name}` setting" if cell.choices.resolution else f"{cell.dataset}'s native size"
        fix = (f"set {name} = {upper}" + (f" or {lower}" if lower else "") + " in the protocol's settings, or "
               if name else "")
        raise SuiteError(f"{where}: {cell.model} cannot take {size} px images ({source}): the resolution must "
                         f"be a multiple of {step} (its patch size); {fix}pick another model")


def _check_model(model_id: str, proto_id: str, where: str, catalog: Catalog) -> bool:
    """The protocol's own check that it can run this model (e.g. `mpp` needs patch tokens)."""
    check = catalog.protocols.get(proto_id).check_model
    problem = check(catalog.models.get(model_id)) if check is not None else None
    if problem:
        raise SuiteError(f"{where}: {problem}")
    return True


def _expand(lists: dict[str, tuple[Any, str]], settings: dict[str, dict], sweeps: dict[str, dict],
            overrides: list[Override], where: str, catalog: Catalog) -> list[Cell]:
    """Cells of one matrix. `lists` maps each list key to (value, the section it came from)."""
    resolved = {key: _resolve_ids(value, key, f"{where}: {section}.{key}", catalog)
                for key, (value, section) in lists.items()}
    count = len(resolved["models"]) * len(resolved["datasets"]) * len(resolved["seeds"]) * sum(
        math.prod(len(v) for v in sweeps.get(p, {}).values()) for p in resolved["protocols"])
    if count > MAX_CELLS:
        raise SuiteError(f"{where}: {count:,} cells in one matrix (models x datasets x seeds x each protocol's "
                         f"sweep); at most {MAX_CELLS:,}: shorten a [sweep] list, or split the suite")
    for proto_id in resolved["protocols"]:  # errors in the base settings point at [settings.<protocol>]
        problem = check_roles(catalog.protocols.get(proto_id))
        if problem:
            raise SuiteError(f"{where}: protocol {proto_id!r} (plugin {catalog.protocols.plugin_of[proto_id]!r}) "
                             f"cannot run: {problem}")
        _resolve_settings(catalog, proto_id, settings.get(proto_id, {}), f"{where}: [settings.{proto_id}]")
    cells, cache, made, checked = [], {}, {}, {}
    for m in resolved["models"]:
        for d in resolved["datasets"]:
            for p in resolved["protocols"]:
                for c, combo in enumerate(_combinations(sweeps.get(p, {}))):
                    for s in resolved["seeds"]:
                        applied = tuple(i for i, o in enumerate(overrides)
                                        if o.applies({"model": m, "dataset": d, "protocol": p, "seed": s}))
                        if (p, c, applied) not in cache:  # settings resolved once per distinct settings
                            given = {**settings.get(p, {}), **combo}
                            for i in applied:
                                given.update(overrides[i].settings.get(p, {}))
                            blob = json.dumps(given, sort_keys=True)
                            cache[p, c, applied] = cache.get((p, blob)) or _resolve_settings(
                                catalog, p, given, f"{where}: [sweep.{p}] {combo}" if combo
                                else f"{where}: [settings.{p}]")
                            cache[p, blob] = cache[p, c, applied]
                        if (m, d, p, c, applied) not in made:  # a cell of another seed is this one's copy
                            made[m, d, p, c, applied] = cell = make_cell(catalog.protocols.get(p), m, d, s,
                                                                         cache[p, c, applied])
                            _check_resolution(cell, f"{where}: cell {m} x {d} x {p}", catalog)
                        else:
                            base = made[m, d, p, c, applied]
                            cell = Cell(m, d, p, s, base.settings, unkeyed=base.unkeyed, choices=base.choices)
                        if (m, p) not in checked:
                            checked[m, p] = _check_model(m, p, f"{where}: cell {m} x {d} x {p}", catalog)
                        cells.append(cell)
    return cells


def _merge(base: dict[str, dict], over: dict[str, dict]) -> dict[str, dict]:
    out = {k: dict(v) for k, v in base.items()}
    for proto, values in over.items():
        out.setdefault(proto, {}).update(values)
    return out


def load_suite(name_or_path: str, catalog: Catalog, *, quick: bool = False, seeds: list[int] | None = None) -> Suite:
    """Validate a suite file against the loaded plugins and expand its cells.

    Cells come from the [suite] matrix (when it names models) and from each [[group]], a matrix of
    its own that inherits [suite]'s lists and [settings] and overrides what it names. Cells with
    the same key appear once.
    """
    path = find_suite(name_or_path)
    doc = parse(path)
    try:
        return _load(path, doc, catalog, quick, seeds)
    except RecursionError:  # values nested within TOML's limits but beyond what is checked here
        raise SuiteError(f"{path}: values nested too deeply") from None


def _load(path: Path, doc: dict[str, Any], catalog: Catalog, quick: bool, seeds: list[int] | None) -> Suite:
    where = str(path)
    _check_keys(doc, TOP_KEYS, where)
    head = _table(doc.get("suite", {}), f"{where}: [suite]")
    _check_keys(head, SUITE_KEYS, f"{where}: [suite]")
    groups = doc.get("group", [])
    if not isinstance(groups, list) or not all(isinstance(g, Mapping) for g in groups):
        raise SuiteError(f"{where}: [[group]] must be an array of tables ([[group]] sections)")
    quick_doc = _table(doc.get("quick", {}), f"{where}: [quick]")
    _check_keys(quick_doc, QUICK_KEYS, f"{where}: [quick]")
    settings = _settings_tables(doc.get("settings", {}), where, "settings", catalog)
    sweeps = _sweep_tables(doc.get("sweep", {}), where, "sweep", catalog)
    overrides = _overrides(doc.get("override", []), where, catalog)
    quick_settings = _settings_tables(quick_doc.get("settings", {}), where, "quick.settings", catalog)
    quick_sweeps = _sweep_tables(quick_doc.get("sweep", {}), where, "quick.sweep", catalog)

    base = {k: (head[k], "[suite]") for k in LIST_KEYS if k in head}
    base.setdefault("seeds", ([0], "[suite]"))
    matrices = []
    if "models" in head or not groups:
        matrices.append((base, settings, sweeps, "[suite]"))
    for n, group in enumerate(groups):
        label = f"[[group]] #{n + 1}"
        _check_keys(group, GROUP_KEYS, f"{where}: {label}")
        lists = {**base, **{k: (group[k], label) for k in LIST_KEYS if k in group}}
        group_settings = _settings_tables(group.get("settings", {}), where, f"group.{n + 1}.settings", catalog)
        group_sweeps = _sweep_tables(group.get("sweep", {}), where, f"group.{n + 1}.sweep", catalog)
        matrices.append((lists, _merge(settings, group_settings), _merge(sweeps, group_sweeps), label))
    cells: dict[str, Cell] = {}
    made_by: dict[str, str] = {}  # cell key: the part of the suite that made it first
    repeats: dict[tuple[str, str], int] = {}
    for lists, matrix_settings, matrix_sweeps, part in matrices:
        for key in ("models", "datasets", "protocols"):
            if key not in lists:
                raise SuiteError(f"{where}: [suite] is missing {key!r} (a list of ids; see `benchbench list {key}`)")
        if quick:
            lists = {**lists, **{k: (v, "[quick]") for k, v in quick_doc.items() if k not in ("settings", "sweep")}}
            matrix_settings = _merge(matrix_settings, quick_settings)
            matrix_sweeps = _merge(matrix_sweeps, quick_sweeps)
        if seeds is not None:
            lists = {**lists, "seeds": (seeds, "--seed")}
        for cell in _expand(lists, matrix_settings, matrix_sweeps, overrides, where, catalog):
            if cells.setdefault(cell.key, cell) is not cell:
                repeats[made_by[cell.key], part] = repeats.get((made_by[cell.key], part), 0) + 1
            made_by.setdefault(cell.key, part)
    given = contenders.parse(doc["contenders"], where, lambda model, at: _resolve_ids([model], "models", at, catalog)[0]
                             ) if "contenders" in doc else []
    cells = {c.key: c for c in contenders.name_cells(list(cells.values()), given, where, catalog.models.claimed)}

    name = check_name(head.get("name", path.stem), where, from_file="name" not in head)
    layout = head.get("table", "models")
    if layout not in TABLE_LAYOUTS:
        raise SuiteError(f"{where}: [suite].table = {layout!r}: allowed: {', '.join(TABLE_LAYOUTS)}")
    limit = check_time_limit(head.get("cell_time_limit_s"), f"{where}: [suite].cell_time_limit_s")
    return Suite(name=name, description=str(head.get("description", "")), path=path, quick=quick,
                 cells=tuple(cells.values() if limit is None else (c.but(time_limit_s=limit) for c in cells.values())), table=layout,
                 executor=_executor(doc, where, catalog),
                 prices=from_suite(doc["cost"], where) if "cost" in doc else (),
                 notes=tuple(contenders.repeats_note(n, first, later) for (first, later), n in repeats.items()))


def check_time_limit(value: Any, where: str) -> float | None:
    """A cell time limit in seconds: a positive finite number, or None (absent) for no limit."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        raise SuiteError(f"{where} = {shown_value(value)}: expected a positive number of seconds (wall time a cell "
                         "may take before it is stopped and recorded as failed); leave it out for no limit")
    return float(value)


def _executor(doc: Mapping[str, Any], where: str, catalog: Catalog) -> dict[str, Any]:
    """The [executor] table (where cells run: `name`, `max_parallel`, [executor.<id>] options), validated
    against the registered executors; {} when the suite has none."""
    if "executor" not in doc:
        return {}
    return suite_table(_table(doc["executor"], f"{where}: [executor]"), where, catalog)


MAX_PARALLEL = Setting(0, int, "cells in flight at once; 0: as many as the executor allows",
                       lambda v: None if v >= 0 else "must be >= 0")
EXECUTOR_KEYS = ("name", "max_parallel")


def check_options(spec: ExecutorSpec, given: Mapping[str, Any], where: str) -> dict[str, Any]:
    """`given` validated against the spec's options, an older spelling (`option_aliases`) read as its
    option (BenchError naming `where`); defaults not filled."""
    out = {}
    for key, value in given.items():
        name = spec.option_aliases.get(key, key)
        if name not in spec.options:
            raise BenchError(f"{where}: {unknown_message(f'{spec.id} executor option', key, spec.options)}")
        out[name] = check_value(key, value, spec.options[name], where)
    return out


def suite_table(table: Mapping[str, Any], where: str, catalog: Catalog) -> dict[str, Any]:
    """A suite's [executor] table, validated: {"name": id or None, "max_parallel": int or None,
    "options": {executor id: {option: value}}} from `name`, `max_parallel` and [executor.<id>] tables."""
    out: dict[str, Any] = {"name": None, "options": {}}
    for key, value in table.items():
        if isinstance(value, Mapping):
            if key not in catalog.executors:
                raise BenchError(f"{where}: [executor.{key}]: {unknown_message('executor id', key, catalog.executors.specs)}")
            spec = catalog.executors.get(key)
            out["options"][spec.id] = check_options(spec, value, f"{where}: [executor.{key}]")
        elif key == "name":
            if not isinstance(value, str) or value not in catalog.executors:
                raise BenchError(f"{where}: [executor].name: {unknown_message('executor id', str(value), catalog.executors.specs)}")
            out["name"] = catalog.executors.get(value).id
        elif key == "max_parallel":
            out["max_parallel"] = check_value(key, value, MAX_PARALLEL, f"{where}: [executor]")
        else:
            raise BenchError(f"{where}: [executor]: {unknown_message('key', key, [*EXECUTOR_KEYS, *catalog.executors.specs])}"
                             " (options go in a table [executor.<id>])")
    return out
