"""The typed record a cell appends to its run: what ran, what it measured, where, and how it ended.

On disk a record is one JSON object per line of records.jsonl (flat, as below). Its `schema` says
which version wrote it:
- 5 (current): `env` says what the numerics depend on and which code and settings made them: `numerics`
  (benchbench.runtime.envinfo.numerics: torch's full version with its local tag, the CPU's model and
  instruction set (`cpu_capability`), deterministic algorithms; on CUDA, CUDA, cuDNN, compute
  capability and their flags), `suite_sha256` (the suite file's hash), and `git_commit` is benchbench's
  own commit wherever the suite lies (up to 4: the commit of the suite file's folder, null for a suite
  outside a git checkout). Older records read without them.
- 4: adds `contender`, the name of the model with its weights (benchbench.store.contender: the
  suite's name for it, else `<model>@<init>`, else the model id); not part of the cell's key. Records
  of schema 3 and older are given their default name when read. Also optional in 4 (absent when not
  measured): `energy_method` (which energy counters were read, or "unmeasured: <why>"),
  `energy_domains` (the counters and devices read, and who else used them), and `price` (the price per
  device-hour a cell's `cost_usd` was computed with, and its source).
- 3: adds `precision`, the precision the cell ran at as resolved on its device ("fp32",
  "bf16", ...; never "auto"), or absent for a protocol without one. Up to schema 2 the built-in
  protocols kept it only as their `precision` setting: `upgrade` resolves that by the record's device.
  Also optional in 3 (absent when the cell had none; older records read without them):
  `checkpoint`, where the weights a cell loaded came from (source, file, revision, commit, sha256,
  format, layout: benchbench.weights.checkpoints.Provenance), and `preprocessing`, the evaluation transform
  its images went through (crop_size, resize_size, resize_mode, interpolation, mean, std, crop_pct,
  source: benchbench.specs.Preprocessing). A protocol's run returns them as JSON objects under these
  names beside its metrics (`CELL_FIELDS`); the worker moves them here (`split_result`).
  Optional `predictions`: the cell's per-image predictions file (benchbench.store.predictions), as
  {"path": relative to the run, "sha256": hex digest, "images": count}; absent where none was kept.
- 2: adds `accuracies`, {metric: label} of the metrics that are accuracies in [0, 1],
  declared by the protocol's spec (`ProtocolSpec.accuracies`); label "" is the cell's main top-1.
- 1: no `accuracies`. Read through `upgrade`: the metric `top1` is the main accuracy, and a metric
  `<prefix>_<k>shot_top1` is a k-shot accuracy labelled "<k>-shot" (the only ones schema 1 had).
  Nothing on disk is rewritten; a record is upgraded each time it is read.
A newer schema than this code knows, or an object that is not a record, is a `RecordError`; so is a
record whose values are not what its fields hold (benchbench.store.values: metrics finite numbers but
the `exec_*` choices, names without control characters, settings JSON values), checked as it is read.

How a cell ran, where it trained or measured speed (benchbench.execution), is in its metrics beside
the figures: `exec_compile`, `exec_compile_mode`, `exec_fused_optimizer`, `exec_channels_last`,
`exec_attention`, `exec_policy`, and `compile_s` (compilation time, never inside `train_img_per_s` or
device-days). Records written before these existed lack them (`Record.execution` is None); they still
load, at the same schema.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from benchbench.choices import resolved_precision
from benchbench.store.contender import default_name
from benchbench.errors import BenchError
from benchbench.store.values import (CHOICE_PREFIX, MetricError, accuracies_problem, check_metrics,
                                      metrics_problem, number_problem, settings_problem, texts_problem)

__all__ = ["CHOICE_PREFIX", "MetricError", "Record", "RecordError", "check_metrics", "upgrade"]

SCHEMA = 5
STATUSES = ("ok", "failed")
OPTIONAL = ("env", "executor", "node", "job_id", "attempts", "precision", "checkpoint", "preprocessing",
            "predictions", "contender", "energy_method", "energy_domains", "price")  # left out of the JSON when None
# What a protocol's run may return beside its metrics, as JSON objects, for the record's own fields.
CELL_FIELDS = ("checkpoint", "preprocessing")  # left out of the JSON when None
_SHOT = re.compile(r"^\w+?_(\d+)shot_top1$")


class RecordError(BenchError):
    """A JSON object that is not a record this code can read."""


@dataclass(frozen=True)
class Record:
    key: str  # the cell's stable key (hash of its resolved settings)
    status: str  # "ok" | "failed"
    model: str
    dataset: str
    protocol: str
    seed: int
    settings: Mapping[str, Any] = field(default_factory=dict)
    metrics: Mapping[str, Any] = field(default_factory=dict)  # names carry units; whatever was measured
    accuracies: Mapping[str, str] = field(default_factory=dict)  # metric -> label ("" = the main top-1)
    model_name: str = ""
    model_family: str = ""
    model_plugin: str = ""
    dataset_name: str = ""
    dataset_plugin: str = ""
    protocol_plugin: str = ""
    resolution: int | None = None
    device: str = ""
    devices: int = 1  # processes that ran it: devices x nodes
    precision: str | None = None  # resolved on its device (schema 3); None: the protocol has none
    flops_status: str | None = None
    error: str | None = None  # "<ExceptionType>: message" of a failed cell
    traceback: str | None = None  # "" for input errors (BenchError), whose message says it all
    started_at: str | None = None
    finished_at: str | None = None
    wall_seconds: float | None = None
    suite: str | None = None
    run_id: str | None = None
    quick: bool = False
    env: Mapping[str, Any] | None = None  # versions, device name, git commit, plugin packages
    # Where the cell ran (optional; absent in records of older versions): the executor's id, the
    # node's host name, the scheduler's job id, and the scheduler's attempts (2+ after a requeue).
    executor: str | None = None
    node: str | None = None
    job_id: str | None = None
    attempts: int | None = None
    # The weights the cell loaded and the evaluation transform it used (schema 3, optional).
    checkpoint: Mapping[str, Any] | None = None
    preprocessing: Mapping[str, Any] | None = None
    predictions: Mapping[str, Any] | None = None  # {"path", "sha256", "images"} of its predictions file
    # Schema 4: the contender's name (benchbench.store.contender; None only in records built without one),
    # the energy counters read (or "unmeasured: <why>") and what they covered, the price of its cost.
    contender: str | None = None
    energy_method: str | None = None
    energy_domains: Mapping[str, Any] | None = None
    price: Mapping[str, Any] | None = None
    schema: int = SCHEMA

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def execution(self) -> dict[str, Any] | None:
        """How the cell ran ({"compile": ..., "compile_mode": ..., ...} from its `exec_*` metrics, and
        `compile_s`), or None for a record without them (older, or a protocol that trains nothing)."""
        out = {k[len("exec_"):]: v for k, v in self.metrics.items() if k.startswith("exec_")}
        if not out:
            return None
        if "compile_s" in self.metrics:
            out["compile_s"] = self.metrics["compile_s"]
        return out

    def to_json(self) -> dict[str, Any]:
        """The object written as one line of records.jsonl."""
        out = dataclasses.asdict(self)
        for name in OPTIONAL:
            if out[name] is None:
                del out[name]
        return out

    @classmethod
    def from_json(cls, obj: Any, *, screened: bool = False) -> "Record":
        """A record from one parsed line, upgraded to the current schema; RecordError if it is none.
        `screened`: the line it was parsed from passed `screened_line` (the checks it makes needless are
        skipped: the same result, faster)."""
        if not isinstance(obj, Mapping):
            raise RecordError(f"a JSON {type(obj).__name__}, not an object")
        obj = upgrade(obj)
        missing = [k for k in ("key", "status", "model", "dataset", "protocol", "seed") if k not in obj]
        if missing:
            raise RecordError(f"not a benchbench record: no {', '.join(missing)}")
        if obj["status"] not in STATUSES:
            raise RecordError(f"status {obj['status']!r}: allowed: {', '.join(STATUSES)}")
        # a typed field's value of one of these types passes at once; any other is checked by _is
        passing = _PARSED_TYPES if screened else _NONE_PASSING
        for name, value in obj.items():
            if (allowed := passing.get(name)) is not None and type(value) not in allowed and \
                    not _is(value, types := _TYPES[name]):
                raise RecordError(f"{name!r} is {type(value).__name__} {_short(value)}, not "
                                  + " or ".join("null" if t is type(None) else _JSON_NAMES.get(t, t.__name__)
                                                for t in types))
        problem = _value_problem(obj, controls=not screened)
        if problem:
            raise RecordError(problem)
        if cls is Record:
            return _record({k: v for k, v in obj.items() if k in _RECORD_FIELDS})
        known = frozenset(f.name for f in dataclasses.fields(cls))
        return cls(**{k: v for k, v in obj.items() if k in known})


_STR, _OPT_STR, _MAP = (str,), (str, type(None)), (Mapping,)
# The JSON type of each field a reader relies on (bool is not an int here, unlike in Python).
_TYPES: dict[str, tuple[type, ...]] = {
    "key": _STR, "status": _STR, "model": _STR, "dataset": _STR, "protocol": _STR, "seed": (int,),
    "settings": _MAP, "metrics": _MAP, "accuracies": _MAP, "model_name": _STR, "model_family": _STR,
    "model_plugin": _STR, "dataset_name": _STR, "dataset_plugin": _STR, "protocol_plugin": _STR,
    "resolution": (int, type(None)), "device": _STR, "devices": (int,), "flops_status": _OPT_STR, "error": _OPT_STR,
    "precision": _OPT_STR,
    "traceback": _OPT_STR, "started_at": _OPT_STR, "finished_at": _OPT_STR, "wall_seconds": (int, float, type(None)),
    "suite": _OPT_STR, "run_id": _OPT_STR, "quick": (bool,), "env": (Mapping, type(None)), "schema": (int,),
    "checkpoint": (Mapping, type(None)), "preprocessing": (Mapping, type(None)),
    "predictions": (Mapping, type(None)),
    "executor": _OPT_STR, "node": _OPT_STR, "job_id": _OPT_STR, "attempts": (int, type(None)),
    "contender": _OPT_STR, "energy_method": _OPT_STR, "energy_domains": (Mapping, type(None)),
    "price": (Mapping, type(None)),
}
# For a record parsed from JSON (whose objects are dicts with string keys), the types each field may have.
_PARSED_TYPES = {name: tuple(dict if t is Mapping else t for t in types) for name, types in _TYPES.items()}
_NONE_PASSING: dict[str, tuple[type, ...]] = {name: () for name in _TYPES}  # every value checked by _is
_RECORD_FIELDS = frozenset(f.name for f in dataclasses.fields(Record))
_RECORD_DEFAULTS = {f.name: f.default for f in dataclasses.fields(Record) if f.default is not dataclasses.MISSING}
_RECORD_FACTORIES = {f.name: f.default_factory for f in dataclasses.fields(Record)
                     if f.default_factory is not dataclasses.MISSING}


def _record(values: dict[str, Any]) -> Record:
    """Record(**values), built without the frozen dataclass's __init__ (a setattr per field through
    object.__setattr__: two thirds of reading a record). Record has no __post_init__; `values` holds
    the required fields (from_json checked them) and only fields."""
    record = object.__new__(Record)
    fields = record.__dict__
    fields.update(_RECORD_DEFAULTS)
    for name, make in _RECORD_FACTORIES.items():
        if name not in values:
            fields[name] = make()
    fields.update(values)
    return record


_JSON_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true/false", Mapping: "an object"}


# Fields that are names: they reach table cells, file names and terminals, so no control characters.
_NAMES = ("key", "status", "model", "dataset", "protocol", "model_name", "model_family", "model_plugin", "dataset_name",
          "dataset_plugin", "protocol_plugin", "device", "precision", "flops_status", "suite", "run_id", "executor",
          "node", "job_id", "started_at", "finished_at", "contender", "energy_method")


def _value_problem(obj: Mapping[str, Any], controls: bool = True) -> str | None:
    """What is wrong inside a record's values (benchbench.store.values), the first found; None if nothing.
    `controls=False` for a record from a `screened_line`: no control character to look for. (The names'
    types are from_json's to check: only control characters remain to look for in them.)"""
    for name in ("seed", "resolution", "devices", "attempts", "wall_seconds"):
        if obj.get(name) is not None and (problem := number_problem(obj[name])):
            return f"{name!r} is {problem}"
    accuracies = obj.get("accuracies") or {}
    return ((controls and texts_problem(obj, _NAMES)) or metrics_problem(obj.get("metrics") or {}, controls)
            or settings_problem(obj.get("settings") or {}, controls)
            or texts_problem(accuracies, tuple(accuracies), controls)
            or texts_problem({"accuracies": " ".join(accuracies)}, ("accuracies",), controls)
            or accuracies_problem(obj.get("metrics") or {}, accuracies))


# Bytes after which a line of records.jsonl may hold a control character in a string: raw ones, the
# backslash (JSON writes them escaped) and 0xc2 (U+0080 to U+009F are C2 80 to C2 9F in UTF-8; a false
# alarm for U+00A0 to U+00BF only costs the full check).
_CONTROL_BYTES = bytes([*range(0x20), 0x7f, 0x5c, 0xc2])
_OTHER_BYTES = bytes(b for b in range(256) if b not in _CONTROL_BYTES)
_STR_TYPE = {str}


def screened_line(raw: bytes) -> bool:
    """Whether a raw line of records.jsonl can hold no control character in any string (see
    `_CONTROL_BYTES`) and no value nested deeper than a setting may be (at most 20 brackets in all): a
    record parsed from it may be read `screened`, its numbers and types still checked."""
    return (raw.count(b"{") + raw.count(b"[") <= 20 and not raw.translate(None, _OTHER_BYTES)
            and b"NaN" not in raw and b"Infinity" not in raw)


def _is(value: Any, types: tuple[type, ...]) -> bool:
    kind = type(value)
    if kind is dict:  # the common cases, quickly
        return Mapping in types and set(map(type, value)) <= _STR_TYPE
    if kind in types:
        return True
    if isinstance(value, bool):
        return bool in types
    return isinstance(value, types) and (not isinstance(value, Mapping) or all(isinstance(k, str) for k in value))


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def split_result(result: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A protocol's run result as (metrics, record fields): the `CELL_FIELDS` it returns as JSON
    objects go to the record's fields of those names, everything else is a metric."""
    metrics = dict(result)
    fields = {name: dict(metrics.pop(name)) for name in CELL_FIELDS if isinstance(metrics.get(name), Mapping)}
    return metrics, fields


def upgrade(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A record object of any known schema as the current schema (see the module docstring): a copy, or
    the object itself when it is a dict of the current schema already (nothing to change)."""
    schema = obj.get("schema", 1)
    if not isinstance(schema, int) or schema < 1 or schema > SCHEMA:
        raise RecordError(f"record schema {schema!r}: this benchbench reads schemas 1 to {SCHEMA}; "
                          "upgrade benchbench to read it")
    if schema == SCHEMA and type(obj) is dict:  # nothing to change (and from_json changes nothing)
        return obj
    out = dict(obj)
    if schema == 1:
        metrics = out.get("metrics") if isinstance(out.get("metrics"), Mapping) else {}
        shots = sorted((int(m.group(1)), name) for name in metrics if (m := _SHOT.match(name)))
        out["accuracies"] = ({name: f"{k}-shot" for k, name in shots} if shots
                             else {"top1": ""} if "top1" in metrics else {})
    settings = out.get("settings") if isinstance(out.get("settings"), Mapping) else {}
    if schema < 3:
        given = settings.get("precision")
        out["precision"] = (resolved_precision(given, str(out.get("device", "")).split(":")[0])
                            if isinstance(given, str) else None)
    if schema < 4 and out.get("contender") is None and isinstance(out.get("model"), str):
        out["contender"] = default_name(out["model"], settings)
    out["schema"] = SCHEMA
    return out
