"""A suite's contenders: the name of each model with its weights among its cells, from its
`[contenders]` table or by default (benchbench.store.contender.default_name), checked to name each one apart.

    [contenders]                     # optional: a name per model with its weights
    in21k = { model = "vit-b16", init = "hf-hub:timm/vit_base_patch16_224.augreg2_in21k_ft_in1k" }
    baseline = { model = "tv/resnet18", init = "weights/resnet18.pth" }

An entry names the cells of its `model` whose `init` setting is its `init` as written in the suite
(`init` left out: the model's cells without one; `model` left out: whichever model loads that init).
A name is not part of a cell's key: naming or renaming a contender never makes another cell. Refused,
with the entry's key path: a name that is not plain (benchbench.store.contender.check_name), an entry that
names no cell of the suite or several contenders, two entries for one contender, two contenders with
one name (two init files of one stem: name them apart here), and a name that another model of the
catalog goes by (its id, an alias, its display name: `verify` and `--models` would take the name for
that model, e.g. `vit-b16` for a vit-mu7 checkpoint).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from benchbench.store.contender import WEIGHTS, check_name, default_name
from benchbench.errors import BenchError, did_you_mean

ENTRY_KEYS = ("model", "init")


@dataclass(frozen=True)
class Given:
    name: str
    model: str | None  # resolved id; None: any model
    init: str  # "" for none
    where: str


def weights(cell) -> str:
    """A cell's `init` setting as written ("" for none)."""
    value = dict(cell.settings).get(WEIGHTS)
    return value.strip() if isinstance(value, str) else ""


def parse(table: Any, where: str, resolve_model: Callable[[str, str], str]) -> list[Given]:
    """The `[contenders]` table's entries, each checked on its own. `resolve_model(id, where)`: the
    model's registered id (BenchError naming `where` for one that is none)."""
    if not isinstance(table, Mapping):
        raise BenchError(f"{where}: [contenders] must be a table of names, e.g. "
                         '[contenders] in21k = { model = "MODEL", init = "hf-hub:ORG/NAME" }')
    out = []
    for name, entry in table.items():
        at = f"{where}: [contenders].{name}"
        check_name(name, f"{where}: [contenders]")
        if not isinstance(entry, Mapping) or not entry:
            raise BenchError(f"{at}: expected a table with model and/or init, e.g. {{ model = \"MODEL\", init = "
                             "\"weights/a.safetensors\" }")
        for key in entry:
            if key not in ENTRY_KEYS:
                hint = did_you_mean(key, ENTRY_KEYS)
                raise BenchError(f"{at}: unknown key {key!r}" + (f"; did you mean {hint!r}?" if hint else "")
                                 + f"\n  allowed: {', '.join(ENTRY_KEYS)}")
        for key in ENTRY_KEYS:
            if key in entry and (not isinstance(entry[key], str) or not entry[key].strip()):
                raise BenchError(f"{at}.{key}: expected a non-empty string, got {entry[key]!r}")
        model = resolve_model(entry["model"], f"{at}.model") if "model" in entry else None
        out.append(Given(name, model, entry.get("init", "").strip(), at))
    return out


def name_cells(cells: Sequence, given: Sequence[Given], where: str,
               model_named: Callable[[str], str | None] = lambda name: None) -> list:
    """`cells` (benchbench.plan.cell.Cell) each with its contender's name: the one `given` gives it, else
    its default name; BenchError as the module docstring says. `model_named(name)`: the id of the
    catalog's model a reader would take `name` for, or None (benchbench.registry.Registry.claimed)."""
    contenders = list(dict.fromkeys((c.model, weights(c)) for c in cells))
    names: dict[tuple[str, str], str] = {}
    for g in given:
        hits = [c for c in contenders if (g.model is None or c[0] == g.model) and c[1] == g.init]
        if not hits:
            loads = sorted({w or "(none)" for m, w in contenders if g.model is None or m == g.model})
            what = f"model {g.model}" if g.model else "any model"
            raise BenchError(f"{g.where}: names no cell of the suite: no cell of {what} has init "
                             f"{g.init or '(none)'!r} (the suite's cells{' of ' + g.model if g.model else ''} load: "
                             f"{', '.join(loads) or 'nothing'}); write init as the suite's settings do")
        if len(hits) > 1:
            raise BenchError(f"{g.where}: names {len(hits)} contenders ({', '.join(m for m, _ in hits)} load "
                             f"{g.init!r}); add model = ... to name one")
        if hits[0] in names:
            raise BenchError(f"{g.where}: {hits[0][0]} with init {g.init or '(none)'!r} is named "
                             f"{names[hits[0]]!r} already; give a contender one name")
        names[hits[0]] = g.name
    models = {m for m, _ in contenders}
    by_name: dict[str, tuple[str, str]] = {}
    for contender in contenders:
        name = names.get(contender) or default_name(contender[0], {WEIGHTS: contender[1]})
        if name in models and name != contender[0]:
            raise BenchError(f"{where}: [contenders].{name}: {name!r} is the id of another model of the suite; "
                             "a name must say one contender on the command line: choose another")
        # a name the suite gives; a default name (`<model>@<init stem>`) is this contender's by construction,
        # though a parametric family may read it as one of its own (timm/<arch>@... as timm/<arch@...>)
        other = model_named(name) if contender in names else None
        if other is not None and other != contender[0]:
            mine = default_name(contender[0], {WEIGHTS: contender[1]})
            raise BenchError(f"{where}: [contenders].{name}: {name!r} names another model of the catalog ({other}), "
                             f"not this contender's {contender[0]} (init {contender[1] or '(none)'!r}): `verify` and "
                             f"--models would take it for {other}; choose another name, e.g. {mine!r}")
        if name in by_name:
            (m1, w1), (m2, w2) = by_name[name], contender
            raise BenchError(f"{where}: two contenders are both named {name!r} ({m1} with init {w1 or '(none)'!r}, "
                             f"{m2} with init {w2 or '(none)'!r}); name them apart in [contenders], e.g. "
                             f'[contenders] {name}-2 = {{ model = "{m2}", init = "{w2}" }}')
        by_name[name] = contender
    named = {c: n for n, c in by_name.items()}
    return [c.but(contender=named[(c.model, weights(c))]) for c in cells]


def repeats_note(count: int, first: str, later: str) -> str:
    """What the dry run says of cells that a suite makes twice (`first` and `later`: the parts that make
    them, [suite] or [[group]] #n)."""
    cells = f"{count} cell{'s' if count != 1 else ''}"
    where = (f"{cells} of {later} {'are' if count != 1 else 'is'} already {first}'s" if first != later else
             f"{first} makes {cells} twice (a list or sweep that names one value twice)")
    return (f"{where}: the same model, dataset, protocol, seed and settings (a contender's name is no part of a "
            "cell); each runs once")
