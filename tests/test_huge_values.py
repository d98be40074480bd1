"""Figures near the largest float (issue 44, item 12): a price beyond any device's is refused in one line;
records holding 1.7e308 joules or dollars (hand-edited, or from an old absurd price) are judged, tabled
and reported, their figures said to be too large to draw instead of a matplotlib or overflow traceback."""

from __future__ import annotations

import json

import pytest

from benchbench.cli import main

pytestmark = pytest.mark.usefixtures("uncounted_zoo")
HUGE = 1.7e308


def _records(root, make_record):
    for run, day in (("a", 1), ("b", 2)):
        folder = root / "s" / run
        folder.mkdir(parents=True)
        lines = []
        for seed in (0, 1):
            record = make_record("vit-mu7", seed=seed, top1=0.5, cost_usd=HUGE, energy_train_j=HUGE)
            line = record.to_json() | {"suite": "s", "run_id": run, "finished_at": f"2026-11-0{day}T00:00:0{seed}+00:00"}
            lines.append(json.dumps(line))
        (folder / "records.jsonl").write_text("\n".join(lines) + "\n")
        (folder / "env.json").write_text(json.dumps({"suite": "s", "quick": False, "table": "models"}))


def test_a_price_beyond_any_devices_is_one_line(capsys):
    assert main(["cost", "vit-mu7", "--images", "100", "--epochs", "1", "--device", "cpu", "--price",
                 "cpu=1e308"]) == 2
    err = capsys.readouterr().err.strip()
    assert "beyond any device's price (at most 10,000)" in err and err.count("\n") == 0


def test_report_and_history_on_records_near_the_largest_float(tmp_path, make_record, capsys):
    root = tmp_path / "r"
    _records(root, make_record)
    assert main(["report", str(root), "-o", str(tmp_path / "site")]) == 0
    page = (tmp_path / "site" / "history.html").read_text()
    assert "No figure of cost_usd: its values reach 1.7e+308" in page
    db = f"sqlite:///{tmp_path / 'b.db'}"
    assert main(["db", "ingest", str(root), "--db", db]) == 0
    capsys.readouterr()
    argv = ["history", "--db", db, "--model", "vit-mu7", "--dataset", "fashion-mnist", "--protocol", "scratch",
            "--metric", "cost_usd"]
    assert main(argv) == 0  # the table, its values whole
    assert "1.7e+308" in capsys.readouterr().out
    assert main([*argv, "--plot", str(tmp_path / "h.svg")]) == 2
    err = capsys.readouterr().err
    assert "no figure of cost_usd: its values reach 1.7e+308" in err and "Traceback" not in err


def test_change_points_of_values_near_the_largest_float():
    from benchbench.judge.changepoints import detect

    segments = detect([HUGE, HUGE, HUGE / 4, HUGE / 4])
    assert [(s.start, s.stop) for s in segments] == [(0, 2), (2, 4)]
    assert segments[0].value == HUGE and segments[1].value == HUGE / 4
