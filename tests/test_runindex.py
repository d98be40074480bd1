"""A resume of a big run reads its records' keys from the run's index instead of parsing every record
(benchbench.store.index): the same records and problems as a full read whatever happened to the file
since the index was written, and a fresh writer's first append starts from it too. The fast paths
under it (a screened line's checks, a cell's key written out) give what the full ones give."""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from benchbench.store import index as runindex

from benchbench.store import shared as sharedstore
from benchbench.store.record import SCHEMA, Record, RecordError, screened_line
from benchbench.plan.cell import Cell
from benchbench.store.shared import append_once
from benchbench.store.rundir import RECORDS, read_keys, read_records

N = runindex.MIN_LINES + 200


def _record(i: int, status: str = "ok", **over) -> dict:
    return {**Record(key=f"k{i:05d}", status=status, model="m", dataset="d", protocol="p", seed=i,
                     job_id=f"j{i}" if i % 3 == 0 else None, error=None if status == "ok" else "RuntimeError: x",
                     metrics={"top1": 0.5, "exec_compile": False}, settings={"lr": 0.1, "n": [1, 2]}).to_json(),
            **over}


def _write(run_dir: Path, objs: list) -> None:
    with open(run_dir / RECORDS, "a") as f:
        for obj in objs:
            f.write((obj if isinstance(obj, str) else json.dumps(obj)) + "\n")


def _same_as_full_read(run_dir: Path) -> runindex.Index | None:
    """The index as read_keys left it, after checking read_keys against read_records (which indexes)."""
    keys = read_keys(run_dir)
    index = runindex.load(run_dir, (run_dir / RECORDS).read_bytes())
    full = read_records(run_dir)
    assert [(e.key, e.ok, e.job_id) for e in keys.entries] == [(r.key, r.ok, r.job_id) for r in full.records]
    assert keys.problems == full.problems
    assert list(keys.records(keys.entries[-3:])) == full.records[-3:]
    return index


def test_keys_from_the_index_equal_a_full_read_as_the_file_grows_and_is_edited(tmp_path):
    _write(tmp_path, [_record(i, "ok" if i % 7 else "failed") for i in range(N)]
           + ["{not json", json.dumps(_record(N, metrics={"top1": "high"}))])  # two lines that are no record
    first = _same_as_full_read(tmp_path)
    assert first is not None and len(first.entries) == N and [n for n, _ in first.problems] == [N + 1, N + 2]
    _write(tmp_path, [_record(N + 10 + i) for i in range(5)])  # appended after the index: parsed, no rewrite
    assert _same_as_full_read(tmp_path).size == first.size
    data = (tmp_path / RECORDS).read_bytes()
    at = data.index(b'"k00042"')
    (tmp_path / RECORDS).write_bytes(data[:at] + b'"k00O42"' + data[at + 8:])  # an edit inside what it covers
    assert runindex.load(tmp_path, (tmp_path / RECORDS).read_bytes()) is None
    assert _same_as_full_read(tmp_path) is not None  # read in full, and indexed again
    with open(tmp_path / RECORDS, "ab") as f:
        f.write(json.dumps(_record(99999)).encode()[:40])  # a torn last line: never indexed
    keys = read_keys(tmp_path)
    assert keys.problems[-1].endswith("torn last line (the run was interrupted while writing it); ignored")
    (tmp_path / RECORDS).write_bytes(data[:len(data) // 2])  # cut shorter than the index
    _same_as_full_read(tmp_path)


@pytest.mark.parametrize("damage", ["garbage", "other-format", "wrong-types"])
def test_a_damaged_index_is_ignored(tmp_path, damage):
    _write(tmp_path, [_record(i) for i in range(N)])
    read_keys(tmp_path)
    index = tmp_path / runindex.INDEX
    obj = json.loads(index.read_text())
    index.write_text({"garbage": "{[", "other-format": json.dumps({**obj, "format": 99}),
                      "wrong-types": json.dumps({**obj, "entries": [[1, 2]]})}[damage])
    assert runindex.load(tmp_path, (tmp_path / RECORDS).read_bytes()) is None
    assert len(read_keys(tmp_path).entries) == N


def test_a_small_run_has_no_index_and_one_that_cannot_be_written_reads_the_same(tmp_path):
    _write(tmp_path, [_record(i) for i in range(10)])
    read_keys(tmp_path)
    assert not (tmp_path / runindex.INDEX).exists()
    _write(tmp_path, [_record(i) for i in range(10, N)])
    (tmp_path / runindex.INDEX).mkdir()  # in the way (as a full disk or a read-only folder would be)
    assert len(read_keys(tmp_path).entries) == N and len(read_records(tmp_path).records) == N
    assert (tmp_path / runindex.INDEX).is_dir() and sorted(p.name for p in tmp_path.iterdir()) == [
        runindex.INDEX, RECORDS]  # no temporary file left behind


def test_a_fresh_writer_starts_from_the_index_and_keeps_one_ok_record_per_cell(tmp_path, monkeypatch):
    # Big enough (over 1 MB) for a fresh writer to start from the index rather than parse the file
    _write(tmp_path, [_record(i, settings={"pad": "x" * 900}) for i in range(N)])
    read_keys(tmp_path)
    sharedstore._INDEXES.clear()
    parsed = []
    real = sharedstore._objects
    monkeypatch.setattr(sharedstore, "_objects", lambda data: parsed.append(len(data)) or real(data))
    assert not append_once(tmp_path, Record.from_json(_record(5)))  # done, known from the index alone
    assert parsed == []  # nothing parsed: the index covers the whole file
    assert not append_once(tmp_path, Record.from_json(_record(3, "failed", job_id="j3")))  # same job
    assert append_once(tmp_path, Record.from_json(_record(N + 1)))
    assert not append_once(tmp_path, Record.from_json(_record(N + 1)))
    assert [r.key for r in read_records(tmp_path).records].count(f"k{N + 1:05d}") == 1


def test_cell_states_from_keys_equal_those_from_records_also_for_records_keyed_before(tmp_path, catalog):
    from benchbench.plan.preview import cell_states
    from benchbench.plan.cell import make_cell
    from benchbench.settings import defaults

    protocol = catalog.protocols.get("measure")
    cells = [make_cell(protocol, "vit-mu7", "fashion-mnist", s, defaults(protocol.settings)) for s in range(N)]
    objs = [_record(i, key=c.key, model=c.model, dataset=c.dataset, protocol=c.protocol, seed=c.seed,
                    settings=dict(c.settings)) for i, c in enumerate(cells)]
    for obj in objs[:50]:  # written before the protocol had its last setting: another key, the same cell
        name = sorted(obj["settings"])[-1]
        obj["settings"] = {k: v for k, v in obj["settings"].items() if k != name}
        obj["key"] = "old" + obj["key"][3:]
    _write(tmp_path, objs)
    read_keys(tmp_path)
    keys = read_keys(tmp_path)
    wanted = {c.key for c in cells}
    by_keys = cell_states(keys.entries, catalog, wanted, keys.records)
    assert by_keys == cell_states(read_records(tmp_path).records, catalog)
    assert set(by_keys) == wanted


def _line(obj) -> bytes:
    return json.dumps(obj, ensure_ascii=False).encode()


_VALUES = st.one_of(st.none(), st.booleans(), st.integers(min_value=-2 ** 70, max_value=2 ** 70),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=6),
                    st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


@settings(max_examples=400, deadline=None)
@given(field=st.sampled_from(["metrics", "settings", "accuracies", "seed", "model", "wall_seconds", "resolution"]),
       name=st.text(max_size=5), value=_VALUES)
def test_a_screened_line_is_judged_as_the_full_check_judges_it(field, name, value):
    obj = _record(1)
    if field in ("metrics", "settings", "accuracies"):
        obj[field] = {**obj[field], name: value}
    else:
        obj[field] = value
    raw = _line(obj).replace(b"Infinity", b"1e999")  # json writes non-finite numbers as NaN/Infinity
    try:
        parsed = json.loads(raw)
    except ValueError:
        return

    def outcome(screened: bool):
        try:
            return Record.from_json(parsed, screened=screened)
        except RecordError as exc:
            return str(exc)

    assert outcome(screened_line(raw)) == outcome(False)


def test_lines_that_may_hide_a_control_character_or_deep_nesting_are_not_screened():
    plain = _line(_record(1))
    assert screened_line(plain)
    for bad in (b'"a\\u0007"', b'"tab\\t"', "\u0085".encode(), b"\x7f", b"NaN", b"-Infinity", b"[" * 21):
        assert not screened_line(plain[:-1] + b', "x": ' + bad + b"}")


@pytest.mark.parametrize("settings_", [(), (("lr", 0.1), ("n", [1, {"é": None}]), ("s", "x\u2028")),
                                       (("b", True), ("f", 1e-7), ("i", -3), ("big", 12345678901234567890))])
def test_a_cells_key_is_the_sha256_of_its_whole_json_as_it_always_was(settings_):
    cell = Cell("vit-b16", "cifar10", "finetune", 3, settings_, unkeyed=frozenset({"s"}))
    blob = json.dumps({"model": "vit-b16", "dataset": "cifar10", "protocol": "finetune", "seed": 3,
                       "settings": {k: v for k, v in settings_ if k != "s"}}, sort_keys=True)
    assert cell.key == hashlib.sha256(blob.encode()).hexdigest()[:16]


def test_a_dry_run_of_a_big_run_plans_from_its_index_and_sees_an_edit(run_suite, catalog, capsys):
    """End to end: a run of 1,200 done cells (records written as a driver writes them) is planned all
    done, from the index the first plan leaves; a record edited to failed afterwards is seen at once."""
    from benchbench.plan.suite import load_suite

    path = run_suite.write(f"""
        [suite]
        name = "big"
        models = ["vit-mu7"]
        datasets = ["fashion-mnist"]
        protocols = ["measure"]
        seeds = {list(range(N))}
    """)
    cells = load_suite(str(path), catalog).cells
    run_dir = run_suite.results / "big" / "20260101-000000"
    run_dir.mkdir(parents=True)
    _write(run_dir, [_record(i, key=c.key, model=c.model, dataset=c.dataset, protocol=c.protocol, seed=c.seed,
                             settings=dict(c.settings)) for i, c in enumerate(cells)])
    for _ in range(2):  # the first plan parses the run and indexes it, the second reads the index
        assert run_suite.run("--dry-run") == 0
        assert f"{N:,} cells: {N} done, 0 to run" in capsys.readouterr().out
        assert (run_dir / runindex.INDEX).is_file()
    data = (run_dir / RECORDS).read_bytes()
    at = data.index(b'"status": "ok"', data.index(cells[7].key.encode()))
    (run_dir / RECORDS).write_bytes(data[:at] + b'"status": "failed"' + data[at + len(b'"status": "ok"'):])
    assert run_suite.run("--dry-run") == 0
    out = capsys.readouterr().out
    assert f"{N - 1} done, 1 to run" in out and len(re.findall(r"\| failed +\| vit-mu7", out)) == 1


def test_a_record_read_back_is_the_record_its_constructor_makes():
    import pickle
    from dataclasses import fields, replace

    for obj in (_record(3), _record(4, "failed", env={"device_name": "cpu"}, checkpoint={"sha256": "ab"}),
                {"key": "k", "status": "ok", "model": "m", "dataset": "d", "protocol": "p", "seed": 0, "schema": SCHEMA}):
        read = Record.from_json(json.loads(json.dumps(obj)), screened=True)
        made = Record(**{k: v for k, v in obj.items() if k in {f.name for f in fields(Record)}})
        assert read == made and repr(read) == repr(made) and read.to_json() == made.to_json()
        assert pickle.loads(pickle.dumps(read)) == made and replace(read, seed=9) == replace(made, seed=9)
    minimal = {"key": "k", "status": "ok", "model": "m", "dataset": "d", "protocol": "p", "seed": 0}
    one, two = Record.from_json(dict(minimal)), Record.from_json(dict(minimal))
    assert one.metrics == {} and one.metrics is not two.metrics  # a default dict of its own, as __init__ gives


def test_cells_whose_settings_python_calls_equal_but_json_does_not_get_their_own_keys():
    """1, 1.0 and True are equal (and hash alike) in Python: a memo of the settings' JSON must not give
    one of them the other's text (their keys would collide, and a resume would take one for the other)."""
    keys = set()
    for value in (1, 1.0, True, 1, "1"):
        cell = Cell("vit-b16", "cifar10", "finetune", 0, (("lr", value),))
        blob = json.dumps({"model": "vit-b16", "dataset": "cifar10", "protocol": "finetune", "seed": 0,
                           "settings": {"lr": value}}, sort_keys=True)
        assert cell.key == hashlib.sha256(blob.encode()).hexdigest()[:16]
        keys.add(cell.key)
    assert len(keys) == 4


def _timed(i: int) -> dict:
    """Records as varied as a time estimate meets them: ok and failed, on two devices (or none named:
    the run's env.json says), at two paces, three protocols and two settings, with img/s and wall times
    or without."""
    ips = {"train_img_per_s": 100.0 + i} if i % 5 else {}
    return _record(i, "failed" if i % 11 == 0 else "ok", model=("vit-mu7", "bit")[i % 2],
                   resolution=(28, 32)[i % 3 % 2], protocol=("scratch", "linear", "measure")[i % 3],
                   dataset="fashion-mnist", precision=(None, "bf16")[i % 4 // 3], devices=1 + i % 5 // 4,
                   metrics={"top1": 0.5, "exec_compile": i % 7 == 0, **ips},
                   settings={"lr": (0.1, 1)[i % 2], "steps": 5}, wall_seconds=(None, 3.5 + i)[i % 8 > 0],
                   env=({"device_name": ("cpu A", "cpu B")[i % 10 // 9]} if i % 13 else None))


def test_timings_from_the_index_are_those_of_the_records(tmp_path):
    """What a resume's time estimate reads of a run (benchbench.store.timing) from its index equals what the
    records give when parsed, as the file grows past the index; an index of another format is rebuilt."""
    from benchbench.store import timing
    from benchbench.store.rundir import read_timings

    def parsed() -> list:
        groups: dict = {}
        return [t for r in read_records(tmp_path).records if (t := timing.of_record(r, groups)) is not None]

    _write(tmp_path, [_timed(i) for i in range(N)])
    first = read_timings(tmp_path)  # parses, and writes the index
    assert (tmp_path / runindex.INDEX).is_file() and first == parsed()
    assert len({t.group for t in first}) < 100 < len(first)  # a handful of groups, shared
    index = runindex.load(tmp_path, (tmp_path / RECORDS).read_bytes())
    assert index is not None and index.timings() == first
    _write(tmp_path, [_timed(N + i) for i in range(7)])  # after the index: parsed
    assert read_timings(tmp_path) == parsed() and len(parsed()) > len(first)
    obj = json.loads((tmp_path / runindex.INDEX).read_text())
    (tmp_path / runindex.INDEX).write_text(json.dumps({**obj, "format": 1}))  # an index of the first format
    assert runindex.load(tmp_path, (tmp_path / RECORDS).read_bytes()) is None
    assert read_timings(tmp_path) == parsed()
    good = obj["timings"]
    for bad in ({**good, "group": [len(good["groups"])] * len(good["group"])}, {**good, "groups": [[1, 2]]},
                {**good, "wall_s": good["wall_s"][1:]}, {**good, "img_per_s": ["fast"] * len(good["group"])},
                {k: v for k, v in good.items() if k != "group"}, [1, 2]):
        (tmp_path / runindex.INDEX).write_text(json.dumps({**obj, "timings": bad}))
        assert runindex.load(tmp_path, (tmp_path / RECORDS).read_bytes()) is None
        assert read_timings(tmp_path) == parsed()


def test_the_history_from_the_index_is_the_history_from_the_records(tmp_path, catalog, monkeypatch):
    """throughput_history of a run of 1,200 varied records: read in full (no index may be written),
    then from the index it leaves, then with lines appended after it: the same paces, img/s, counts,
    medians and fixed costs each time."""
    from benchbench.plan.preview import throughput_history

    run = tmp_path / "suite" / "run"
    run.mkdir(parents=True)
    (run / "env.json").write_text(json.dumps({"device_name": "cpu A"}))
    _write(run, [_timed(i) for i in range(N)])
    with monkeypatch.context() as m:
        m.setattr(runindex, "MIN_LINES", 10 ** 9)
        full = throughput_history([tmp_path], "cpu A", catalog)
    assert not (run / runindex.INDEX).exists()
    assert throughput_history([tmp_path], "cpu A", catalog) == full  # parses, and indexes
    assert (run / runindex.INDEX).is_file()
    assert throughput_history([tmp_path], "cpu A", catalog) == full  # from the index
    speeds = sorted((str(p), s.n, s.img_per_s) for p, s in full.items())
    assert len(speeds) >= 4 and sum(n > 10 for _, n, _ in speeds) >= 4 and any(s.overhead_s for s in full.values())
    assert {p.model for p in full} == {"vit-mu7", "bit"}
    _write(run, [_timed(N + i) for i in range(30)])
    with monkeypatch.context() as m:
        m.setattr(runindex, "MIN_LINES", 10 ** 9)
        (run / runindex.INDEX).rename(tmp_path / "index.json")
        grown = throughput_history([tmp_path], "cpu A", catalog)
        (tmp_path / "index.json").rename(run / runindex.INDEX)
    assert throughput_history([tmp_path], "cpu A", catalog) == grown != full


def test_a_command_reads_and_hashes_a_big_run_once_for_keys_and_timings(tmp_path, monkeypatch):
    """read_keys then read_timings of an unchanged run: the index is parsed and the records hashed once;
    after an append the records are hashed again (and the new line parsed)."""
    from benchbench.store.rundir import read_timings

    _write(tmp_path, [_timed(i) for i in range(N)])
    read_keys(tmp_path)  # writes the index
    hashed = []
    real = runindex.digest
    monkeypatch.setattr(runindex, "digest", lambda data, size: hashed.append(size) or real(data, size))
    monkeypatch.setattr(runindex, "_last", None)
    keys, timings = read_keys(tmp_path), read_timings(tmp_path)
    assert len(hashed) == 1 and len(keys.entries) == N and len(timings) > N // 2
    _write(tmp_path, [_timed(N + 1)])  # ok, with an img/s
    assert len(read_timings(tmp_path)) == len(timings) + 1 and len(hashed) == 2


@settings(max_examples=200, deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from(["lr", "n", "b"]), _VALUES, max_size=3), min_size=1, max_size=6))
def test_a_timings_settings_text_is_json_dumps_of_them_whatever_was_remembered(many):
    """timing.settings_json remembers the text of settings it has seen; 1, 1.0 and True (equal in
    Python) and lists (unhashable) still get their own JSON."""
    from benchbench.store.timing import settings_json

    for s in [*many, {"lr": 1}, {"lr": 1.0}, {"lr": True}, {"lr": [1]}, *many]:
        try:
            want = json.dumps(s, sort_keys=True)
        except ValueError:
            continue
        assert settings_json(s) == want
