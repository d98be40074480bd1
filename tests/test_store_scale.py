"""The store at scale, as a user's sweep makes it (issue 44, item 15): a run folder holding many records
of other cells (a sweep's other seeds) and a suite with one cell left. A plan, a resume and its table
read the run's index and only the records that may be the suite's cells' (benchbench.plan.recorded),
never every record; what they find is what reading every record gives. Counted, never timed: the
timings are benchmarks/store_append.py --sweep's."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from benchbench.plan.cell import Cell, key_today, make_cell
from benchbench.plan.preview import cell_states
from benchbench.plan.recorded import suite_records, suite_states
from benchbench.settings import defaults
from benchbench.store import index as runindex
from benchbench.store import results
from benchbench.store.record import Record
from benchbench.store.rundir import RECORDS, first_record, read_keys, read_records, run_mode

N = runindex.MIN_LINES + 50  # records of other cells: enough for the run to keep an index


@pytest.fixture
def parsed(monkeypatch) -> list[Record]:
    """Each record parsed from now on (every reader goes through Record.from_json)."""
    records: list[Record] = []
    real = Record.from_json.__func__

    def counting(cls, obj, **kwargs):
        record = real(cls, obj, **kwargs)
        records.append(record)
        return record

    monkeypatch.setattr(Record, "from_json", classmethod(counting))
    return records


def _seeds(records: list[Record], protocol: str) -> list[int]:
    """The seeds of `records` of `protocol` (a plan also reads the repository's published runs' timings)."""
    return [r.seed for r in records if r.protocol == protocol]


def _cell_key(record: dict, seed: int) -> str:
    """The key of the cell of `record`'s model, dataset, protocol and settings at `seed` (the gated
    protocol keys every setting and has no defaults to add)."""
    return Cell(record["model"], record["dataset"], record["protocol"], seed,
                tuple(sorted(record["settings"].items()))).key


def _sweep(run_suite, gated) -> tuple[Path, dict]:
    """A real one-cell run (seed 0) of the gated protocol, its records.jsonl then replaced by copies of
    its record for seeds 1..N, each keyed as its cell, and indexed (as the sweep's own runs leave it):
    its suite has one cell left."""
    gated.suite(run_suite, 1, None, name="sweep")
    assert run_suite.run() == 0
    run_dir = run_suite.run_dir
    (line,) = (run_dir / RECORDS).read_text().splitlines()
    record = json.loads(line)
    assert record["key"] == _cell_key(record, 0)  # keyed as the test keys the copies
    (run_dir / RECORDS).write_text("".join(
        json.dumps({**record, "seed": s, "key": _cell_key(record, s)}, sort_keys=True) + "\n" for s in range(1, N + 1)))
    read_keys(run_dir)
    assert (run_dir / runindex.INDEX).is_file()
    return run_dir, record


def test_a_dry_run_and_a_resume_with_one_cell_left_parse_no_record_of_another_cell(run_suite, gated, parsed,
                                                                                   capsys):
    run_dir, record = _sweep(run_suite, gated)
    left = 0  # the real run's cell: its record is gone, the suite has that one cell left
    parsed.clear()
    capsys.readouterr()
    assert run_suite.run("--dry-run") == 0
    assert "1 cell: 0 done, 1 to run" in capsys.readouterr().out
    assert _seeds(parsed, "gated") == []  # the states from the index; no record read to key it as today
    assert run_suite.run() == 0  # resumes the sweep's run
    assert set(_seeds(parsed, "gated")) == {left}  # the new record (written, then read for its table): no other
    assert run_suite.run_dir == run_dir
    records = read_records(run_dir).records
    assert len(records) == N + 1 and records[-1].seed == left and records[-1].key == _cell_key(record, left)


def _measure_records(catalog) -> tuple[list[Cell], list[dict]]:
    """Ten cells of the `measure` protocol, and records in the order a run could hold them: many of other
    seeds; of each cell's a failure then a success, or the other way round; and some written before
    the protocol had its last setting (another key, the same cell: only key_today finds it)."""
    protocol = catalog.protocols.get("measure")
    settings = defaults(protocol.settings)
    cells = [make_cell(protocol, "vit-mu7", "fashion-mnist", seed, settings) for seed in range(10)]
    others = [make_cell(protocol, "vit-mu7", "fashion-mnist", seed, settings) for seed in range(100, 100 + N)]

    def record(cell: Cell, status: str = "ok", **over) -> dict:
        return {**Record(key=cell.key, status=status, model=cell.model, dataset=cell.dataset, protocol=cell.protocol,
                         seed=cell.seed, settings=dict(cell.settings), metrics={"top1": 0.5},
                         error=None if status == "ok" else "RuntimeError: x").to_json(), **over}

    older = {k: v for k, v in cells[5].settings if k != sorted(settings)[-1]}
    objs = [record(c) for c in others]
    objs += [record(cells[0], "failed"), record(cells[0]), record(cells[1]), record(cells[1], "failed")]
    objs += [record(cells[2]), record(cells[3], "failed")]
    objs += [record(cells[5], key="0ld" + cells[5].key[3:], settings=older)]  # keyed before; not done by its key
    objs += [record(c, metrics={"top1": 0.25}) for c in others[:3]]
    return cells, objs


def test_suite_states_and_records_are_what_every_record_gives_reading_only_the_suites(tmp_path, catalog, parsed):
    cells, objs = _measure_records(catalog)
    (tmp_path / RECORDS).write_text("".join(json.dumps(o) + "\n" for o in objs) + "{not a record\n")
    read_keys(tmp_path)  # indexes the run
    every = read_records(tmp_path).records
    wanted = {c.key for c in cells}
    expected = {k: v for k, v in cell_states(every, catalog).items() if k in wanted}
    assert expected == {cells[0].key: "done", cells[1].key: "failed", cells[2].key: "done",
                        cells[3].key: "failed", cells[5].key: "done"}

    parsed.clear()
    keys = read_keys(tmp_path)
    assert suite_states(keys, catalog, cells) == expected
    assert _seeds(parsed, "measure") == [5]  # the one record of a cell under an older key, read for its key as today
    parsed.clear()
    rows = results.frame(suite_records(keys, catalog, cells))
    assert sorted(_seeds(parsed, "measure")) == [0, 0, 1, 1, 2, 3, 5]  # the suite's cells' records only

    # What the run's table was made of before: every record keyed as today, the suite's cells' last each,
    # in the suite's order.
    df = results.load(tmp_path, cell_key=lambda r: key_today(r, catalog))
    order = {c.key: i for i, c in enumerate(cells)}
    df = df[df["key"].isin(order)]
    df = df.assign(_order=df["key"].map(order)).sort_values("_order", kind="stable").drop(columns="_order")
    pd.testing.assert_frame_equal(rows, df.reset_index(drop=True))
    assert list(rows["key"]) == [cells[i].key for i in (0, 1, 2, 3, 5)]


def test_the_index_keeps_each_records_cell_and_a_damaged_cell_number_is_ignored(tmp_path, catalog):
    cells, objs = _measure_records(catalog)
    (tmp_path / RECORDS).write_text("".join(json.dumps(o) + "\n" for o in objs))
    parsed = read_keys(tmp_path).entries  # parsed, then indexed
    runindex._last = runindex._checked = None
    data = (tmp_path / RECORDS).read_bytes()
    assert runindex.load(tmp_path, data).entries == parsed  # the same entries, cells included
    assert [(e.model, e.dataset, e.protocol, e.seed) for e in parsed] == [
        (o["model"], o["dataset"], o["protocol"], o["seed"]) for o in objs]
    obj = json.loads((tmp_path / runindex.INDEX).read_text())
    for number in (len(obj["cells"]), -1, "0", None, True):
        obj["entries"][7][5] = number
        (tmp_path / runindex.INDEX).write_text(json.dumps(obj))
        assert runindex.load(tmp_path, data) is None, number


def test_a_runs_mode_without_env_json_is_read_from_its_first_record_alone(tmp_path, parsed):
    def record(seed: int, quick: bool) -> str:
        return json.dumps(Record(key=f"k{seed}", status="ok", model="m", dataset="d", protocol="p", seed=seed,
                                 quick=quick).to_json()) + "\n"

    (tmp_path / RECORDS).write_text("{torn\n" + "[1, 2]\n" + "".join(record(s, s > 0) for s in range(N)))
    assert run_mode(tmp_path) is False and _seeds(parsed, "p") == [0]  # not the N - 1 after it
    assert first_record(tmp_path) == read_records(tmp_path).records[0]
    (tmp_path / RECORDS).write_text("{torn\n")
    assert run_mode(tmp_path) is None
