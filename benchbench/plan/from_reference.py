"""A reference table as a suite: the cell each published figure is of (its model, dataset, protocol,
resolution and settings, matched as `benchbench verify` matches them), each row that cannot be produced
here left out with why, and the suite file of the rest, loaded by the suite loader before it is written
(docs/compute.md, "A reference as a suite").

A row is left out, in one line, when: no model, dataset or protocol here goes by its names, or one does
but verify would not match its cell to the row (an alias of the registry that is neither its id nor its
name); it names no dataset or protocol; a setting is none of its protocol's, or no value of it; the
protocol cannot set its resolution; its figure is an accuracy and its protocol records none (a compute
protocol: `measure`); no cell of its model records the count its `convention` names (a
`reparameterized` count of a model that declares no inference form); the data its
protocol reads, or a file a setting names (an `init` checkpoint), is not here; or the loader refuses its
cell. Rows that are figures of one cell (params and GMACs of one model) share it.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import textwrap
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Collection, Mapping, Protocol, Sequence

from benchbench import outside
from benchbench.errors import BenchError, unknown_message
from benchbench.plan.cell import check_roles, make_cell
from benchbench.plan.suite import check_name, load_suite, suite_dirs
from benchbench.plugins import Catalog
from benchbench.settings import check_value, resolve
from benchbench.specs import DataOptions, ModelSpec, ProtocolSpec, Setting, input_shape
from benchbench.store.atomic import write_text
from benchbench.text import plural

# How a line near the top of every suite written here opens: a file that has it is replaced without --force.
MARK = "# Written by `benchbench suite from-reference"
MARK_LINES = 5  # where the mark is looked for: the file's first lines
WIDTH = 110  # characters of a line of the file, as the shipped suites keep them
QUICK_TRIES = 5  # models tried for [quick] before the suite goes without one


class Figure(Protocol):
    """What a reference row (benchbench.judge.reference.Row) says of the cell it is a figure of."""

    @property
    def line(self) -> int: ...

    @property
    def model(self) -> str: ...

    @property
    def names(self) -> tuple[str, ...]:  # the model and its aliases, lower-cased
        ...

    @property
    def dataset(self) -> str | None: ...

    @property
    def protocol(self) -> str | None: ...

    @property
    def resolution(self) -> int | None: ...

    @property
    def settings(self) -> tuple[tuple[str, str], ...]: ...

    @property
    def metric(self) -> str: ...

    @property
    def convention(self) -> str | None: ...

    @property
    def label(self) -> str: ...


@dataclass(frozen=True)
class Wanted:
    """One cell as the suite file writes it: its ids and the settings its rows give."""

    model: str
    dataset: str
    protocol: str
    settings: tuple[tuple[str, Any], ...]  # as written: only those the rows name (and a resolution)
    key: str  # the cell's key at seed 0 (benchbench.plan.cell.Cell.key)
    counts: bool = False  # its protocol declares no accuracies: a compute cell


@dataclass(frozen=True)
class LeftOut:
    line: int
    label: str
    why: str

    def said(self, reference: Path | str) -> str:
        """One line: "REF:7: ResNet50x1 params (...): left out: why"."""
        return f"{reference}:{self.line}: {self.label}: left out: {self.why}"


@dataclass(frozen=True)
class Plan:
    reference: Path
    rows: int  # in the reference
    cells: tuple[Wanted, ...]  # each once, in the order of the rows that first name them
    given: tuple[tuple[int, str, str], ...]  # (a produced row's line, its label, its cell's key)
    left_out: tuple[LeftOut, ...]
    quick: tuple[str, ...] = ()  # [quick]'s models (empty: none found that loads)

    @property
    def produced(self) -> int:
        return len(self.given)


class _Refused(Exception):
    """Why a row cannot be produced here, in one line."""


def plan(figures: Sequence[Figure], reference: Path, catalog: Catalog, *, counts: Callable[[str, str], str],
         data: DataOptions, accuracy: Callable[[str, Collection[str]], bool]) -> Plan:
    """The cells of `figures` (a reference's rows) and the rows left out. `counts(convention, metric)` is
    the record metric holding a row's figure in its `convention` (benchbench.judge.reference.count_of);
    `data` is where datasets are looked for (`DatasetSpec.available`); `accuracy(metric, accuracies)`
    says whether a row's metric is an accuracy, as verify judges it (benchbench.judge.reference.is_accuracy)."""
    cells: dict[str, Wanted] = {}
    given, left = [], []
    for figure in figures:
        try:
            wanted = _cell(figure, catalog, data, counts, accuracy)
        except _Refused as why:
            left.append(LeftOut(figure.line, figure.label, _one_line(str(why))))
            continue
        cells.setdefault(wanted.key, wanted)
        given.append((figure.line, figure.label, wanted.key))
    return Plan(Path(reference), len(figures), tuple(cells.values()), tuple(given), tuple(left))


def recorded_counts(spec: ModelSpec) -> tuple[str, ...]:
    """The counts every cell of the model records (benchbench.meters.flops.MacCount.metrics: its MACs in
    each convention, and its inference form's MACs and parameters where its spec declares that form),
    and `params`: the record metrics a row's convention may name."""
    from benchbench.meters.flops import MacCount  # torch

    fused = (0, 0) if spec.inference_form is not None else None
    return (*MacCount(0, {}, (), inference=fused).metrics(), "params")


def _cell(figure: Figure, catalog: Catalog, data: DataOptions, counts: Callable[[str, str], str],
          accuracy: Callable[[str, Collection[str]], bool]) -> Wanted:
    model = _model(figure, catalog)
    dataset = _dataset(figure, catalog)
    protocol = _protocol(figure, catalog)
    problem = check_roles(protocol)
    if problem:
        raise _Refused(f"protocol {protocol.id!r} cannot run: {problem}")
    given = {name: _value(name, text, protocol) for name, text in figure.settings}
    settings = _resolved(protocol, given)
    role = protocol.roles.resolution
    px = _pixels(protocol, model, dataset, settings, catalog)
    if figure.resolution is not None and px != figure.resolution:
        if role is None:
            raise _Refused(f"protocol {protocol.id!r} sets no resolution: its cells of {model} on {dataset} are "
                           f"at {px} px, not {figure.resolution}")
        if role in given:
            raise _Refused(f"its settings give {role} = {given[role]!r}, which is {px} px, not {figure.resolution}")
        given[role] = figure.resolution
        settings = _resolved(protocol, given)
    if not protocol.accuracies(settings) and accuracy(figure.metric, ()):
        raise _Refused(f"its figure {figure.metric} is an accuracy, and protocol {protocol.id!r} records none (it "
                       f"measures compute): verify would find no {figure.metric} in its cell; write a protocol that "
                       "trains or evaluates (benchbench list protocols)")
    if figure.convention is not None:
        count, recorded = counts(figure.convention, figure.metric), recorded_counts(catalog.models.get(model))
        if count not in recorded:
            form = (f"; {model} declares no inference form (ModelSpec.inference_form: a timm model's is timm's "
                    "reparameterize_model), so its model as built is the one counted: leave the convention empty"
                    if count.endswith("_reparameterized") else "")
            raise _Refused(f"no cell of {model} records {count!r}, the count of its convention "
                           f"{figure.convention!r} (its cells record {', '.join(recorded)}){form}")
    _check_data(catalog, dataset, protocol, data)
    _check_files(protocol, settings)
    cell = make_cell(protocol, model, dataset, 0, settings)
    return Wanted(model, dataset, protocol.id, tuple(given.items()), cell.key,
                  counts=not protocol.accuracies(settings))


def _model(figure: Figure, catalog: Catalog) -> str:
    """The id of the first of the row's names a model goes by here, its aliases before the table's name."""
    names = (*figure.names[1:], *figure.names[:1])
    first: BenchError | None = None
    for name in names:
        try:
            found = catalog.models.resolve(name)
        except BenchError as exc:
            first = first or exc
            continue
        spec = catalog.models.get(found)
        if not {spec.id.lower(), spec.name.lower()} & set(figure.names):
            raise _Refused(f"{name!r} is model {spec.id} here, but verify matches a cell by its model's id or "
                           f"name ({spec.id}, {spec.name}); add {spec.id} to the row's aliases")
        return spec.id
    shown = ", ".join(repr(figure.model if n == figure.model.lower() else n) for n in names)
    raise _Refused(f"no model here goes by {shown}: {first}")


def _dataset(figure: Figure, catalog: Catalog) -> str:
    if figure.dataset is None:
        raise _Refused("no dataset: the row holds for any cell, and a suite's cell needs one; write the dataset "
                       "the figure is of (benchbench list datasets)")
    try:
        found = catalog.datasets.resolve(figure.dataset)
    except BenchError as exc:
        raise _Refused(str(exc)) from None
    spec = catalog.datasets.get(found)
    if figure.dataset.lower() not in {spec.id.lower(), spec.name.lower()}:
        raise _Refused(f"dataset {figure.dataset!r} is {spec.id} here, but verify matches a cell by its dataset's "
                       f"id or name ({spec.id}, {spec.name}); write {spec.id}")
    return spec.id


def _protocol(figure: Figure, catalog: Catalog) -> ProtocolSpec:
    if figure.protocol is None:
        raise _Refused("no protocol: the row holds for any cell, and a suite's cell needs one; write the protocol "
                       "whose cell gives the figure (benchbench list protocols)")
    try:
        spec = catalog.protocols.get(figure.protocol)
    except BenchError as exc:
        raise _Refused(str(exc)) from None
    if figure.protocol.lower() != spec.id.lower():
        raise _Refused(f"protocol {figure.protocol!r} is {spec.id} here, but verify matches a cell by its "
                       f"protocol's id; write {spec.id}")
    return spec


def _value(name: str, text: str, protocol: ProtocolSpec) -> Any:
    """The setting's value the row writes as `text`, typed as the protocol declares it."""
    setting = protocol.settings.get(name)
    if setting is None:
        raise _Refused(unknown_message(f"{protocol.id} setting", name, protocol.settings))
    value = _typed(text, setting)
    try:
        return check_value(name, value, setting, "settings")
    except BenchError as exc:
        raise _Refused(str(exc)) from None


def _typed(text: str, setting: Setting) -> Any:
    """A TOML value where `text` is one of a type the setting takes (7, 1e-3, true), else the text
    itself where the setting takes text (hf-hub:..., a path)."""
    types = setting.type if isinstance(setting.type, tuple) else (setting.type,)
    spelled = text.lower() if text.lower() in ("true", "false") else text
    try:
        value = tomllib.loads(f"v = {spelled}")["v"] if "\n" not in text and "\r" not in text else text
    except tomllib.TOMLDecodeError:
        return text
    if isinstance(value, bool) and bool not in types:
        return text if str in types else value
    numeric = float in types and isinstance(value, int)
    return value if isinstance(value, types) or numeric or str not in types else text


def _resolved(protocol: ProtocolSpec, given: Mapping[str, Any]) -> dict[str, Any]:
    try:
        return resolve(protocol, given, "settings")
    except BenchError as exc:
        raise _Refused(str(exc)) from None


def _pixels(protocol: ProtocolSpec, model: str, dataset: str, settings: Mapping[str, Any], catalog: Catalog) -> int:
    """The resolution a cell of these settings records (its images' size)."""
    cell = make_cell(protocol, model, dataset, 0, settings)
    return input_shape(cell.choices.resolution, catalog.models.get(model), catalog.datasets.get(dataset))["image_size"]


def _check_data(catalog: Catalog, dataset: str, protocol: ProtocolSpec, data: DataOptions) -> None:
    """Refused where a split the protocol reads is not where the dataset's loader looks (as `run` checks)."""
    spec = catalog.datasets.get(dataset)
    if spec.available is None:
        return
    for split in (s for s in protocol.reads if s in spec.splits):
        try:
            spec.available(split, data)
        except BenchError as exc:
            raise _Refused(f"{protocol.id} reads the {split} split of {dataset}, which is not here: {exc}") from None


def _check_files(protocol: ProtocolSpec, settings: Mapping[str, Any]) -> None:
    """Refused where a setting names something that is not here (`Setting.locate`: an init checkpoint)."""
    for name, value in settings.items():
        locate = protocol.settings[name].locate
        if locate is None:
            continue
        try:
            locate(value)
        except BenchError as exc:
            raise _Refused(f"it loads {name} = {value!r}, which is not here: {exc}") from None


def _one_line(text: str) -> str:
    """A message of several lines as one: its lines joined by "; " (after a colon, by a space)."""
    return re.sub(r"\s*[\r\n]+\s*", "; ", re.sub(r":\s*[\r\n]+\s*", ": ", text.strip()))


# --- the suite file ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Header:
    """What the file's comments say: the command that wrote it and the commands that use it."""

    arguments: str  # what followed `benchbench suite from-reference` on the command line
    run: str  # how `benchbench run` names the suite: its stem where suites/ holds it, else its path
    reference: str  # the reference as the command named it


def loadable(p: Plan, catalog: Catalog, name: str, header: Header) -> Plan:
    """`p` with the cells the suite loader refuses left out (their rows, each with the loader's words),
    and [quick]'s models: the first of the suite's models whose quick mode loads. The file's text then
    loads, full and quick."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"{name}.toml"

        def refusal(q: Plan) -> str | None:
            write_text(path, text(q, name, header))
            try:
                load_suite(str(path), catalog)
                if q.quick:
                    load_suite(str(path), catalog, quick=True)
            except BenchError as exc:
                return _one_line(str(exc).removeprefix(f"{path}: "))
            return None

        if p.cells and refusal(p) is not None:
            refused = {}
            for wanted in p.cells:
                why = refusal(replace(p, cells=(wanted,), given=(), left_out=()))
                if why is not None:
                    refused[wanted.key] = f"the suite loader refuses its cell: {why}"
            p = _without(p, refused)
            if p.cells and (why := refusal(p)) is not None:  # every cell loads alone, not together
                raise BenchError(f"{p.reference}: its cells load one by one but not as one suite: {why}")
        models = list(dict.fromkeys(w.model for w in p.cells))
        for model in models[:QUICK_TRIES]:
            if refusal(replace(p, quick=(model,))) is None:
                return replace(p, quick=(model,))
    return p


def _without(p: Plan, refused: Mapping[str, str]) -> Plan:
    left = [*p.left_out, *(LeftOut(line, label, refused[key]) for line, label, key in p.given if key in refused)]
    return replace(p, cells=tuple(w for w in p.cells if w.key not in refused),
                   given=tuple(g for g in p.given if g[2] not in refused),
                   left_out=tuple(sorted(left, key=lambda x: x.line)))


def text(p: Plan, name: str, header: Header) -> str:
    """The suite file: a comment saying how it was made and which rows it leaves out, [suite], one
    matrix per dataset, protocol and settings (in [suite] when there is one, else a [[group]] each),
    and [quick]."""
    matrices: dict[str, tuple[str, str, tuple, list[str]]] = {}
    for w in p.cells:  # keyed by their JSON: a setting's value may be a list
        matrix = matrices.setdefault(json.dumps([w.dataset, w.protocol, w.settings]), (w.dataset, w.protocol,
                                                                                        w.settings, []))
        if w.model not in matrix[3]:
            matrix[3].append(w.model)
    lines = [f"# benchbench run {header.run}        (then: benchbench verify {header.reference} RUN)", "#",
             *_wrapped(f"{MARK[2:]} {header.arguments}`: the cells that give {p.produced} of its {plural(p.rows, 'row')}, "
                       "each at the model, dataset, protocol, resolution and settings its row names. That command "
                       "replaces this file; a file it did not write, only with --force.")]
    if p.left_out:
        lines += ["#", f"# Left out, not producible here ({len(p.left_out)} of the {plural(p.rows, 'row')}):"]
        for x in p.left_out:
            lines += _wrapped(f"line {x.line}{f' ({x.label})' if x.label else ''}: {x.why}", "#   ", "#     ")
    compute = p.cells and all(w.counts for w in p.cells)
    described = (f"the cells of {p.produced} of the {plural(p.rows, 'row')} of {p.reference.name} (written by benchbench "
                 "suite from-reference)")
    lines += ["", "[suite]", f"name = {_toml(name)}",
              f"description = {_toml(described)}",
              f"table = {_toml('compute' if compute else 'models')}"]
    one = len(matrices) == 1
    for dataset, protocol, settings, models in matrices.values():
        lines += [] if one else ["", "[[group]]"]
        lines += [*_listed("models", models), f"datasets = {_toml([dataset])}", f"protocols = {_toml([protocol])}"]
        if settings and one:
            lines += ["", f"[settings.{_key(protocol)}]", *(f"{_key(k)} = {_toml(v)}" for k, v in settings)]
        elif settings:
            lines.append(f"settings.{_key(protocol)} = {{ "
                         + ", ".join(f"{_key(k)} = {_toml(v)}" for k, v in settings) + " }")
    if p.quick:
        lines += ["", "[quick]", f"models = {_toml(list(p.quick))}"]
    return "\n".join(lines) + "\n"


def _wrapped(text: str, first: str = "# ", later: str = "# ") -> list[str]:
    """`text` as TOML comment lines of at most WIDTH characters (a word longer stays whole), without the
    control characters TOML refuses in a comment."""
    clean = re.sub(r"[\x00-\x1f\x7f]+", " ", text)
    return textwrap.wrap(clean, WIDTH, initial_indent=first, subsequent_indent=later, break_long_words=False,
                         break_on_hyphens=False)


def _listed(key: str, values: Sequence[str]) -> list[str]:
    """`key = [...]` on one line, or where longer than WIDTH, a few values a line as the shipped suites have it."""
    one = f"{key} = {_toml(list(values))}"
    if len(one) <= WIDTH:
        return [one]
    rows: list[str] = []
    for item in (f"{_toml(v)}," for v in values):  # whole values: a space inside one is no place to break
        if rows and len(rows[-1]) + 1 + len(item) <= WIDTH - 4:
            rows[-1] += f" {item}"
        else:
            rows.append(item)
    return [f"{key} = [", *(f"    {row}" for row in rows), "]"]


def _key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def _toml(value: Any) -> str:
    """A TOML value: strings as basic strings (JSON's escapes are TOML's), numbers, booleans, lists."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    raise BenchError(f"a setting's value {value!r} ({type(value).__name__}) has no TOML spelling here")


def run_name(out: Path) -> str:
    """How `benchbench run` names the suite at `out`: its stem where it finds it by that (suites/), else
    the path."""
    found = [d / f"{out.stem}.toml" for d in suite_dirs()]
    return out.stem if out.suffix == ".toml" and out.resolve() in found else str(out)


def suite_name(out: Path) -> str:
    """The suite's name: the file's stem, checked as the loader checks a name (a folder of the results)."""
    return check_name(out.stem, f"-o {out}", from_file=False)


MAX_SUITE_BYTES = 16 << 20  # a suite this command writes is kilobytes; an -o file beyond is not one


def check_target(out: Path, *, force: bool) -> None:
    """BenchError where `out` holds a file this command did not write (its mark not in its first lines),
    unless `force`."""
    if os.path.lexists(out) and not force:
        head = outside.read_text(out, what="-o", max_bytes=MAX_SUITE_BYTES).splitlines()
        if not any(line.startswith(MARK) for line in head[:MARK_LINES]):
            raise BenchError(f"-o {out}: exists, and is not a suite `benchbench suite from-reference` wrote (its "
                             f"first lines have no {MARK[2:]!r}...); name another file, or add --force to replace it")


def write(out: Path, content: str, *, force: bool) -> None:
    """`content` to `out`, whole (a temporary file renamed), where `check_target` lets it."""
    check_target(out, force=force)
    write_text(out, content)
