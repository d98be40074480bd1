"""An accuracy is a fraction in [0, 1]: a record holding top-1 = 1.5 (or a declared accuracy of -0.1) is
refused as it is read, with a line naming the metric, so `table` never prints 150 %; a cell whose
protocol reports one cannot write it."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from benchbench.cli import main
from benchbench.store.record import Record, RecordError
from benchbench.store.rundir import RecordLineError, append_record, read_records, record_line


@pytest.mark.parametrize("metrics, accuracies, bad", [
    ({"top1": 1.5}, {"top1": ""}, "top1"),
    ({"top1": 0.5, "top5": 1.0000001}, {"top1": ""}, "top5"),  # top5 whatever the record declares
    ({"top1": 0.5, "fewshot_5shot_top1": -0.1}, {"top1": "", "fewshot_5shot_top1": "5-shot"}, "fewshot_5shot_top1"),
    ({"top1": 85}, {"top1": ""}, "top1"),  # a percentage, not a fraction
])
def test_an_accuracy_outside_0_1_is_no_record(make_record, metrics, accuracies, bad):
    record = replace(make_record("vit"), metrics=metrics, accuracies=accuracies)
    with pytest.raises(RecordError, match=rf"metric '{bad}' is .*an accuracy outside \[0, 1\]"):
        Record.from_json(json.loads(json.dumps(record.to_json())))
    with pytest.raises(RecordLineError, match="accuracy outside"):
        record_line(record)


@pytest.mark.parametrize("value", [0, 1, 0.0, 1.0, 0.85])
def test_the_edges_and_other_metrics_read(make_record, value):
    record = replace(make_record("vit", top1=value), metrics={"top1": value, "top5": value, "ece": 0.2,
                                                              "train_loss": 7.5, "top1_diff": -3.0})
    assert Record.from_json(json.loads(record_line(record))).metrics["top1"] == value


def test_table_refuses_a_record_of_150_percent_and_shows_the_rest(tmp_path, make_record, capsys):
    run = tmp_path / "run"
    run.mkdir()
    append_record(run, make_record("vit-a", top1=0.8))
    line = json.loads(record_line(make_record("vit-b", top1=0.8)))
    line["metrics"]["top1"] = 1.5  # edited by hand
    with open(run / "records.jsonl", "a") as f:
        f.write(json.dumps(line) + "\n")
    read = read_records(run)
    assert [r.model for r in read.records] == ["vit-a"] and len(read.problems) == 1
    assert main(["table", str(run), "--layout", "summary"]) == 0
    out, err = capsys.readouterr()
    assert "records.jsonl:2:" in err and "'top1' is 1.5, an accuracy outside [0, 1]" in err
    assert "150" not in out and "VIT-B" not in out.upper().replace("VIT-A", "")


def test_a_cell_reporting_an_accuracy_of_1_5_fails_with_why(make_record):
    from benchbench.run.worker import writable

    got = writable(make_record("vit", top1=1.5))
    assert got.status == "failed" and got.metrics == {} and "'top1' is 1.5, an accuracy outside [0, 1]" in got.error
    assert Record.from_json(json.loads(record_line(got))) == got
