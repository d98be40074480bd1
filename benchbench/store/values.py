"""What the values inside a record may be, checked where a cell writes its record and where records
are read back (a file may be edited, or written by an older or foreign version).

- A metric is a finite JSON number (an int within +-2**63, or a finite float), except the metrics
  named `exec_*` (how the cell ran: benchbench.execution), which may also be a string, true/false or
  null. On the writing side (`check_metrics`) a numpy or torch scalar, or a tensor or array of one
  element, holding one finite number is converted to that number; anything else is a MetricError
  naming the metric, and fails that cell only.
- Names (ids, display names, plugins, device, run id, ...) and setting strings hold no control
  characters (tab and newline included): they reach table cells, file names and terminals.
- Settings are JSON values: strings, finite numbers, true/false, null, lists and objects of them.
- An accuracy is a fraction in [0, 1]: each metric a record declares in `accuracies`, and `top1` and
  `top5` wherever they are (a table prints 1.5 as 150 %). A record holding one outside is refused as
  it is read (its cell is missing, and runs again on resume), and a cell reporting one fails.
"""

from __future__ import annotations

import math
import re
from typing import Any, Mapping

from benchbench.errors import BenchError

CHOICE_PREFIX = "exec_"  # metrics that record a choice (str, bool or null), not a measurement
INT_LIMIT = 2 ** 63  # the integers every reader (pandas, numpy, a float) holds exactly enough
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


class MetricError(BenchError):
    """A protocol returned a metric that a record cannot hold."""


def short(value: Any, limit: int = 40) -> str:
    """`repr(value)`, cut to `limit` characters."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a foreign object's repr may fail; its type still names it
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _kind(value: Any) -> str:
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool) or value is None:
        return "true/false" if value is not None else "null"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, (list, tuple)):
        return "a list"
    return f"a {type(value).__name__}"


def number_problem(value: Any) -> str | None:
    """None when `value` is a finite JSON number; else what it is instead."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{_kind(value)} {short(value)}"
    if isinstance(value, int) and not -INT_LIMIT < value < INT_LIMIT:
        return f"an integer of {len(str(abs(value)))} digits, beyond +-2**63"
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value!r}, not finite"
    return None


def metric_problem(name: Any, value: Any) -> str | None:
    """None when `value` is what the metric `name` may hold (see the module docstring); else why not."""
    if not isinstance(name, str) or not name or _CONTROL.search(name):
        return f"metric name {short(name)} is not a plain non-empty string"
    if name.startswith(CHOICE_PREFIX) and (value is None or isinstance(value, (str, bool))):
        return None if not isinstance(value, str) or not _CONTROL.search(value) else \
            f"metric {name!r} holds control characters"
    problem = number_problem(value)
    if problem is None:
        return None
    allowed = "a finite number, a string, true/false or null" if name.startswith(CHOICE_PREFIX) else "a finite number"
    return f"metric {name!r} is {problem}, not {allowed}"


def _plain_number(value: Any) -> Any:
    """A numpy or torch scalar, or a one-element array or tensor, as the Python number it holds; else
    `value` as it is (the check then names it). MetricError for an array or tensor of other sizes."""
    if value is None or isinstance(value, (bool, int, float, str, Mapping, list, tuple)):
        return value
    numel = getattr(value, "numel", None)
    size = numel() if callable(numel) else getattr(value, "size", None)
    if not isinstance(size, int) or not callable(getattr(value, "item", None)):
        return value
    if size != 1:
        raise MetricError(f"holds {size} elements")
    try:
        out = value.item()
    except Exception:  # noqa: BLE001 - e.g. a tensor without data: not a number
        return value
    return value if isinstance(out, bool) else out  # a numpy/torch bool is no number


def check_metrics(metrics: Any) -> dict[str, Any]:
    """A protocol's metrics as a record holds them: scalars converted (see the module docstring);
    MetricError (one line naming the metric) for anything else."""
    if not isinstance(metrics, Mapping):
        raise MetricError(f"metrics: the protocol returned {_kind(metrics)} {short(metrics)}, not "
                          "{metric name: number}")
    out: dict[str, Any] = {}
    for name, value in metrics.items():
        try:
            value = _plain_number(value)
        except MetricError as exc:
            raise MetricError(f"metric {short(name)} is a {type(value).__name__} that {exc}, not a finite "
                              "number; return one number (e.g. `.item()` of a one-element tensor)") from None
        problem = metric_problem(name, value)
        if problem is not None:
            raise MetricError(problem if problem.startswith("metric ") else f"metric {problem}")
        out[name] = float(value) if isinstance(value, float) else value
    return out


def text_problem(value: Any) -> str | None:
    """None when `value` is a string without control characters; else what is wrong with it."""
    if not isinstance(value, str):
        return f"{_kind(value)} {short(value)}, not a string"
    if _CONTROL.search(value):
        return f"{short(value)} holds control characters"
    return None


def json_value_problem(value: Any, depth: int = 0) -> str | None:
    """None when `value` is a setting's kind of JSON value (see the module docstring); else what is not."""
    if depth > 20:
        return "nested more than 20 levels deep"
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, str):
        return text_problem(value)
    if isinstance(value, (int, float)):
        return number_problem(value)
    if isinstance(value, (list, tuple)):
        return next((p for v in value if (p := json_value_problem(v, depth + 1))), None)
    if isinstance(value, Mapping):
        for k, v in value.items():
            problem = (None if isinstance(k, str) else f"key {short(k)} is not a string") or \
                json_value_problem(v, depth + 1)
            if problem:
                return problem
        return None
    return f"{_kind(value)} {short(value)}"


# The same checks over a whole record's values, fast for the common case (read-back of 100,000 records
# must stay quick): plain types are tested first, and only a value that fails is looked at again to
# say why. `controls=False`: the values come from a line that can hold no control character
# (benchbench.store.record.screened_line), so the searches for them are skipped; the verdict is the same.

def texts_problem(obj: Mapping[str, Any], names: tuple[str, ...], controls: bool = True) -> str | None:
    """None when each of `names` in `obj` is absent, null or plain text; else the first problem."""
    values = [obj.get(name) for name in names]
    if all(v is None or type(v) is str for v in values) and not (controls and _CONTROL.search(
            " ".join(v for v in values if v is not None))):
        return None
    return next(f"{name!r} is {p}" for name, v in zip(names, values) if v is not None and (p := text_problem(v)))


def metrics_problem(metrics: Mapping[str, Any], controls: bool = True) -> str | None:
    """None when every metric holds what it may (`metric_problem`); else the first problem."""
    for name, value in metrics.items():
        kind = type(value)
        if (kind is float and math.isfinite(value)) or (kind is int and -INT_LIMIT < value < INT_LIMIT):
            continue
        if not controls and name.startswith(CHOICE_PREFIX) and (kind is str or kind is bool or value is None):
            continue  # a choice: all metric_problem would look for in it is control characters
        if problem := metric_problem(name, value):
            return problem
    if controls and _CONTROL.search(" ".join(k for k in metrics if type(k) is str)):
        return next(p for k in metrics if (p := metric_problem(k, 0)))
    return None


def settings_problem(settings: Mapping[str, Any], controls: bool = True) -> str | None:
    """None when every setting is a JSON value (`json_value_problem`) under a plain name; else the first."""
    for name, value in settings.items():
        kind = type(value)
        if kind is bool or value is None or (kind is int and -INT_LIMIT < value < INT_LIMIT) or (
                kind is float and math.isfinite(value)) or (kind is str and not (controls and _CONTROL.search(value))):
            if type(name) is str and not (controls and _CONTROL.search(name)):
                continue
        if problem := (text_problem(name) or json_value_problem(value)):
            return f"setting {short(name)}: {problem}"
    return None


ACCURACY_NAMES = ("top1", "top5")  # accuracies whatever a record declares


def accuracies_problem(metrics: Mapping[str, Any], accuracies: Mapping[str, Any]) -> str | None:
    """None when each accuracy among `metrics` (those `accuracies` declares, and `ACCURACY_NAMES`) is a
    number in [0, 1]; else the first that is not (its type is metrics_problem's to check)."""
    for name in (*ACCURACY_NAMES, *accuracies):
        value = metrics.get(name)
        if type(value) in (int, float) and not 0 <= value <= 1:
            return (f"metric {name!r} is {value!r}, an accuracy outside [0, 1] (a fraction: 0.85, not 85); "
                    "correct the record, or run its cell again")
    return None
