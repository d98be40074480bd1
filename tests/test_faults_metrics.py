"""Whatever a plugin returns, the cell owns it (issue 27, category 1).

A metric is a finite JSON number, or (only the documented `exec_*` metrics) a string, true/false or
null. A numpy or torch scalar holding one finite number is converted to it. Anything else (a tensor of
more elements, NaN, infinity, a string where a number belongs, a nested object, an object JSON cannot
hold) fails its own cell with an error naming the metric; the suite goes on, and a re-run retries the
cell. A model whose outputs are not finite during evaluation fails its cell too.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from benchbench.errors import BenchError

# seed -> what the protocol returns as its metric `top1` (and one extra metric for some)
BAD_PLUGIN = """
import math
import numpy as np
import torch
from benchbench import hookimpl
from benchbench.specs import ProtocolSpec

CASES = [
    lambda: {"top1": torch.tensor([0.5, 0.25])},            # 0: a tensor of two elements
    lambda: {"top1": float("nan")},                          # 1: NaN
    lambda: {"top1": math.inf},                              # 2: infinity
    lambda: {"top1": "0.5"},                                 # 3: a string where a number belongs
    lambda: {"top1": 0.5, "extra": {"nested": [1, 2]}},      # 4: a nested object
    lambda: {"top1": 0.5, "when": object()},                 # 5: what JSON cannot hold
    lambda: {"top1": np.float32(0.5), "n": np.int64(7)},     # 6: numpy scalars: converted
    lambda: {"top1": torch.tensor(0.25), "n": torch.tensor([3])},  # 7: torch scalars: converted
    lambda: {"top1": np.float64("nan")},                     # 8: a numpy NaN
    lambda: {"top1": 10 ** 400},                             # 9: an integer too large for a float
    lambda: {"top1": 0.75, "exec_compile": True, "exec_compile_mode": None},  # 10: fine as it is
]

def run(ctx):
    return CASES[ctx.seed]()

@hookimpl
def register_protocols(register):
    register(ProtocolSpec(id="bad-metrics", name="Bad metrics", run=run))
"""

FAILS = {0: "'top1'", 1: "'top1'", 2: "'top1'", 3: "'top1'", 4: "'extra'", 5: "'when'", 8: "'top1'", 9: "'top1'"}


def test_a_metric_json_cannot_hold_fails_its_own_cell_and_the_suite_goes_on(run_suite, capsys):
    run_suite.plugin(BAD_PLUGIN, "bad.py")
    run_suite.write("""
        [suite]
        models = ["vit-mu7"]
        datasets = ["fashion-mnist"]
        protocols = ["bad-metrics"]
        seeds = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    """, "bad.toml")
    assert run_suite.run() == 1
    err = capsys.readouterr().err
    assert f"{len(FAILS)} of 11 cells failed" in err
    assert "Traceback" not in err
    by = {r.seed: r for r in run_suite.records()}
    assert len(by) == 11
    for seed, metric in FAILS.items():
        assert by[seed].status == "failed", seed
        assert by[seed].error.startswith("MetricError: metric " + metric), by[seed].error
        assert by[seed].metrics["params"] > 0  # what was measured before stays
        assert "top1" not in by[seed].metrics or math.isfinite(by[seed].metrics["top1"])
    assert by[6].ok and by[6].metrics["top1"] == 0.5 and by[6].metrics["n"] == 7 and type(by[6].metrics["n"]) is int
    assert by[7].ok and by[7].metrics["top1"] == 0.25 and by[7].metrics["n"] == 3
    assert by[10].ok and by[10].metrics["exec_compile"] is True and by[10].metrics["exec_compile_mode"] is None
    # Every line of the file is strict JSON (no NaN, no Infinity): any JSON reader reads it.
    for line in (run_suite.run_dir / "records.jsonl").read_text().splitlines():
        json.loads(line, parse_constant=lambda name: pytest.fail(f"{name} in records.jsonl"))
    # A re-run retries exactly the failed cells; the converted ones are done.
    assert run_suite.run() == 1
    seeds = [r.seed for r in run_suite.records()]
    assert sorted(seeds) == sorted([*range(11), *FAILS])


_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-10 ** 500, max_value=10 ** 500), st.floats(), st.text(max_size=5),
    st.floats().map(np.float64), st.floats(width=32).map(np.float32), st.integers(-2 ** 63, 2 ** 63 - 1).map(np.int64),
    st.floats().map(torch.tensor), st.lists(st.floats(), max_size=3).map(torch.tensor),
    st.lists(st.floats(), max_size=3).map(np.array), st.just(object()), st.just(b"bytes"))
_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner,
                                                                                               max_size=3), max_leaves=6)
_names = st.one_of(st.sampled_from(["top1", "params", "exec_compile", "exec_policy"]), st.text(max_size=8))


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(_names, _values, max_size=5))
def test_check_metrics_keeps_a_finite_json_number_or_says_which_metric_is_not(metrics):
    from benchbench.store.record import CHOICE_PREFIX, check_metrics

    try:
        out = check_metrics(metrics)
    except BenchError as exc:
        message = str(exc)
        assert message.startswith("metric ") and "\n" not in message and len(message) < 400
        assert any(repr(name)[:30] in message for name in metrics)
        return
    assert set(out) == set(metrics)
    text = json.dumps(out, allow_nan=False)  # strict JSON, or this raises
    assert json.loads(text) == out
    for name, value in out.items():
        if name.startswith(CHOICE_PREFIX):
            assert value is None or isinstance(value, (str, bool, int, float))
        else:
            assert type(value) in (int, float) and math.isfinite(value)
            original = metrics[name]
            assert value == (original.item() if hasattr(original, "item") else original)


def test_evaluation_of_a_model_whose_outputs_are_not_finite_fails():
    from torch.utils.data import TensorDataset

    from benchbench.precision import resolve
    from plugins.protocols.training import evaluate

    class Broken(torch.nn.Module):
        def forward(self, x):
            out = torch.zeros(len(x), 4)
            out[-1, 2] = float("nan")  # the last image of each batch
            return out

    cpu = torch.device("cpu")
    data = TensorDataset(torch.zeros(7, 1, 2, 2), torch.zeros(7, dtype=torch.long))
    with pytest.raises(FloatingPointError, match="3 of 7 images"):
        evaluate(Broken(), data, cpu, batch_size=3, precision=resolve("fp32", cpu))
