"""Records read back whatever they contain (issue 27, category 2).

A record line whose values are not what its fields hold (a metric of another type, a number too large
for a float, control characters in a name, a setting JSON cannot hold) is one `file:line` warning and
its cell is missing; `table`, `plot`, `compare` and `report` never crash on any content: they print a
table, a figure or a site from what is readable, or one `error:` line (exit status 2).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchbench.cli import main
from benchbench.store.record import Record
from benchbench.store.rundir import RECORDS, read_records

pytestmark = pytest.mark.usefixtures("uncounted_zoo")  # report's zoo MACs: pinned in test_report.py


GOOD = {"key": "good", "status": "ok", "model": "vit-mu7", "dataset": "fashion-mnist", "protocol": "scratch", "seed": 0,
        "metrics": {"top1": 0.5, "top5": 0.9, "params": 219194, "macs": 6986816, "gmacs": 0.007, "gflops": 0.014,
                    "train_img_per_s": 1000.0, "train_device_seconds": 10.0, "train_exaflops": 2.5e-06},
        "accuracies": {"top1": ""}, "settings": {"lr": 0.003, "batch_size": 128, "epochs": 1},
        "model_name": "ViT-mu/7", "model_family": "vit", "dataset_name": "Fashion-MNIST", "device": "cpu",
        "flops_status": "ok", "resolution": 28, "schema": 3}

# Values that are hostile somewhere: big, non-finite, of other types, with control characters.
_text = st.one_of(st.text(max_size=12), st.sampled_from(["a\x1b[31mred", "tab\there", "line\nbreak", "\x00", "",
                                                          "x" * 300, "ünïcødé", "a|b", "<script>", "$x$"]))
_number = st.one_of(st.integers(min_value=-10 ** 30, max_value=10 ** 30), st.sampled_from([10 ** 400, -10 ** 400]),
                    st.floats(), st.sampled_from([0, -1, 1e308, -1e308, 5e-324, 2 ** 63, 2 ** 63 - 1]))
_json = st.recursive(st.one_of(st.none(), st.booleans(), _number, _text),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
                     max_leaves=5)
_metric_names = st.one_of(st.sampled_from(["top1", "top5", "params", "gmacs", "macs", "train_img_per_s",
                                           "train_exaflops", "exec_compile", "exec_policy", "compile_s"]), _text)


@st.composite
def hostile_records(draw) -> dict:
    out = json.loads(json.dumps(GOOD))
    out["key"] = draw(st.text(alphabet="abcdef0123456789", min_size=1, max_size=6))
    out["seed"] = draw(st.integers(0, 3))
    for name in draw(st.lists(st.sampled_from(["model", "dataset", "model_name", "dataset_name", "model_family",
                                               "device", "protocol"]), max_size=2)):
        out[name] = draw(_text)
    out["metrics"].update(draw(st.dictionaries(_metric_names, _json, max_size=3)))
    out["settings"].update(draw(st.dictionaries(_text, _json, max_size=2)))
    if draw(st.booleans()):
        out["status"] = "failed"
        out["error"] = draw(_text)
    return out


def _encode(obj: dict) -> bytes:
    # Python's json writes NaN and Infinity, and integers of any size, as a careless writer would
    return json.dumps(obj).encode("utf-8", "surrogatepass") + b"\n"


def _write_run(run_dir: Path, objs: list[dict]) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / RECORDS).write_bytes(_encode(GOOD) + b"".join(_encode(o) for o in objs))
    (run_dir / "env.json").write_text(json.dumps({"suite": "hostile", "quick": False, "table": "models"}))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(hostile_records(), min_size=1, max_size=4))
def test_every_line_is_a_valid_record_or_one_file_line_warning(tmp_path, objs):
    from benchbench.store.rundir import record_line

    _write_run(tmp_path, objs)
    read = read_records(tmp_path)
    assert len(read.records) + len(read.problems) == len(objs) + 1
    for problem in read.problems:
        assert problem.startswith(f"{tmp_path / RECORDS}:") and "\n" not in problem and len(problem) < 600
    for record in read.records:  # whatever was accepted is what a cell may write, and writes back the same
        assert Record.from_json(json.loads(record_line(record))) == record
        for name, value in record.metrics.items():
            assert name.startswith("exec_") or (type(value) in (int, float) and math.isfinite(value))


@pytest.mark.parametrize("case, line, why", [
    ("a metric that is a string", {"metrics": {"top1": "0.5"}}, "metric 'top1' is a string"),
    ("a metric that is a list", {"metrics": {"top1": [0.5]}}, "metric 'top1' is a list"),
    ("a metric that is an object", {"metrics": {"gmacs": {"v": 1}}}, "metric 'gmacs' is an object"),
    ("a number too large for a float", {"metrics": {"params": 10 ** 400}}, "metric 'params' is an integer of 401"),
    ("NaN", {"metrics": {"top1": math.nan}}, "metric 'top1' is nan, not finite"),
    ("a control character in a model name", {"model": "vit\x1b[2J"}, "'model' is 'vit\\x1b[2J' holds control"),
    ("a dataset folder's name with a newline", {"dataset_name": "my\ndata"}, "'dataset_name'"),
    ("a setting JSON cannot hold as a number", {"settings": {"lr": math.inf}}, "setting 'lr': inf, not finite"),
])
def test_a_record_with_a_value_its_field_does_not_hold_is_one_warning_and_its_cell_is_missing(
        tmp_path, capsys, case, line, why):
    bad = {**GOOD, "key": "bad", "model": "vit-bad", **line}
    _write_run(tmp_path, [bad])
    read = read_records(tmp_path)
    assert [r.key for r in read.records] == ["good"]
    assert len(read.problems) == 1 and read.problems[0].startswith(f"{tmp_path / RECORDS}:2: ")
    assert why in read.problems[0]
    assert main(["table", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert "vit-bad" not in out and "ViT-mu/7" in out
    assert err.count(f"{RECORDS}:2:") == 1


def _cli_never_crashes(capsys, argv: list[str], allowed=(0, 1, 2)) -> tuple[int, str, str]:
    try:
        status = main(argv)
    except SystemExit as exc:  # argparse
        status = exc.code
    out, err = capsys.readouterr()
    assert status in allowed, (argv, status, err[-2000:])
    assert "Traceback" not in err
    if status == 2:
        assert err.strip().splitlines()[-1].startswith("error: ")
    return status, out, err


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(hostile_records(), min_size=1, max_size=4), st.sampled_from(
    ["models", "summary", "paper-transfer", "paper-scaling", "data-scaling", "compute"]),
    st.sampled_from(["markdown", "latex", "csv", "html"]))
def test_table_and_compare_never_crash_on_any_record(tmp_path, capsys, objs, layout, fmt):
    a, b = tmp_path / "a", tmp_path / "b"
    _write_run(a, objs)
    _write_run(b, objs[::-1])
    _cli_never_crashes(capsys, ["table", str(a), "--layout", layout, "--format", fmt, "--force-flops"])
    _cli_never_crashes(capsys, ["compare", str(a), str(b), "--all"])


@pytest.mark.slow
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(hostile_records(), min_size=1, max_size=4), st.sampled_from(["accuracy-vs-compute", "data-scaling"]))
def test_plot_and_report_never_crash_on_any_record(tmp_path, capsys, objs, kind):
    _write_run(tmp_path / "r" / "s" / "a", objs)
    _write_run(tmp_path / "r" / "s" / "b", objs[:1])
    _cli_never_crashes(capsys, ["plot", str(tmp_path / "r" / "s" / "a"), "--kind", kind, "-o",
                                str(tmp_path / "f.svg")])
    _cli_never_crashes(capsys, ["report", str(tmp_path / "r"), "-o", str(tmp_path / "site")], allowed=(0,))


@pytest.mark.slow
def test_plot_and_report_read_past_bad_records(tmp_path, capsys):
    bad = [{**GOOD, "key": "b1", "metrics": {"top1": "high"}}, {**GOOD, "key": "b2", "model": "a\x07b"},
           {**GOOD, "key": "b3", "seed": 1, "metrics": {**GOOD["metrics"], "top1": 0.7, "gmacs": 10 ** 400}}]
    _write_run(tmp_path / "r" / "s" / "a", bad)
    status, out, err = _cli_never_crashes(capsys, ["plot", str(tmp_path / "r" / "s" / "a"), "--kind",
                                                   "accuracy-vs-compute", "-o", str(tmp_path / "f.svg")])
    assert status == 0 and (tmp_path / "f.svg").stat().st_size > 0
    assert err.count("warning: ") == 3
    status, out, err = _cli_never_crashes(capsys, ["report", str(tmp_path / "r"), "-o", str(tmp_path / "site")])
    assert status == 0 and err.count("warning: ") == 3 and "records.jsonl:2:" in err
