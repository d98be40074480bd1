"""The store scales (issue 27, category 6): an append reads only what was appended since this process
last looked, never the whole records.jsonl, and keeps its guarantees under many writers: at most one
ok record per cell, one record per cell key and job, whoever appends."""

from __future__ import annotations

import json
import multiprocessing
import os
from dataclasses import replace
from pathlib import Path

import pytest

from benchbench.store.record import Record
from benchbench.store.shared import append_once
from benchbench.store.rundir import RECORDS, read_records


def _record(key: str, status: str = "ok", job_id: str | None = None, pad: int = 0) -> Record:
    return Record(key=key, status=status, model="m", dataset="d", protocol="p", seed=0, job_id=job_id,
                  error=None if status == "ok" else "RuntimeError: boom", metrics={"top1": 0.5},
                  settings={"pad": "x" * pad})


def _bytes_read() -> int:
    """Bytes this process has read through system calls so far (Linux's /proc/self/io rchar)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


def test_an_append_reads_what_was_appended_since_not_the_whole_file(tmp_path):
    lines = b"".join(json.dumps(_record(f"k{i}", pad=400).to_json()).encode() + b"\n" for i in range(5000))
    (tmp_path / RECORDS).write_bytes(lines)  # 2+ MB written by another process, before this one looked
    assert append_once(tmp_path, _record("first"))  # the first look reads it once
    before = _bytes_read()
    for i in range(20):
        assert append_once(tmp_path, _record(f"new{i}"))
    per_append = (_bytes_read() - before) / 20
    assert per_append < 8_000, f"{per_append:.0f} bytes read per append into a {len(lines):,}-byte file"
    assert not append_once(tmp_path, _record("k4999"))  # still knows the cells done before it looked
    assert len(read_records(tmp_path).records) == 5021


def test_the_index_follows_other_writers_a_replaced_file_and_an_edit_in_place(tmp_path):
    assert append_once(tmp_path, _record("a"))
    with open(tmp_path / RECORDS, "ab") as f:  # another writer (it held the lock) appended b's ok record
        f.write(json.dumps(_record("b").to_json()).encode() + b"\n")
    assert not append_once(tmp_path, _record("b"))
    # Replaced by a file without a's record (a new inode): read anew, and a runs again.
    (tmp_path / "new").write_bytes(json.dumps(_record("b").to_json()).encode() + b"\n")
    os.replace(tmp_path / "new", tmp_path / RECORDS)
    assert append_once(tmp_path, _record("a"))
    # Rewritten in place, the same size, a's record turned into another cell's: noticed, read anew.
    data = (tmp_path / RECORDS).read_bytes()
    (tmp_path / RECORDS).write_bytes(data.replace(b'"key": "a"', b'"key": "c"'))
    assert append_once(tmp_path, _record("a"))
    assert not append_once(tmp_path, _record("c"))
    # Cut shorter (a repaired torn tail): read anew.
    (tmp_path / RECORDS).write_bytes(data.split(b"\n")[0] + b"\n")
    assert append_once(tmp_path, _record("a"))


def test_a_torn_line_left_by_a_dead_writer_is_read_once_whole(tmp_path):
    whole = json.dumps(_record("a").to_json()).encode()
    (tmp_path / RECORDS).write_bytes(whole[:30])  # a writer killed mid-line
    assert append_once(tmp_path, _record("b"))
    assert not append_once(tmp_path, _record("b"))
    assert [r.key for r in read_records(tmp_path).records] == ["b"]


def _writer(run_dir: str, worker: int, keys: int) -> None:
    for i in range(keys):
        append_once(Path(run_dir), _record(f"k{i}", "ok" if (i + worker) % 3 else "failed", job_id=f"j{i}"))
        append_once(Path(run_dir), _record(f"k{i}", "ok", job_id=f"w{worker}-{i}"))


def test_many_writers_keep_one_ok_record_per_cell_and_one_record_per_job(tmp_path):
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), w, 40)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    read = read_records(tmp_path)
    assert read.problems == []
    ok = [r.key for r in read.records if r.ok]
    assert sorted(ok) == sorted(set(ok)) == sorted(f"k{i}" for i in range(40))
    jobs = [(r.key, r.job_id) for r in read.records]
    assert len(jobs) == len(set(jobs))
    # Nothing after a cell's ok record: every record of k after its ok one would be a second result.
    seen_ok = set()
    for r in read.records:
        assert r.key not in seen_ok
        seen_ok |= {r.key} if r.ok else set()


def test_a_record_that_cannot_be_strict_json_is_refused_before_anything_is_written(tmp_path):
    from benchbench.store.rundir import RecordLineError, append_record

    with pytest.raises(RecordLineError, match="metric 'top1'"):
        append_record(tmp_path, replace(_record("a"), metrics={"top1": float("nan")}))
    assert not (tmp_path / RECORDS).exists() or (tmp_path / RECORDS).read_bytes() == b""


def test_a_run_read_again_parses_only_what_was_appended_and_notices_a_rewrite(tmp_path):
    from benchbench.store.rundir import RunReader

    lines = [json.dumps(_record(f"k{i}", pad=400).to_json()).encode() + b"\n" for i in range(3000)]
    (tmp_path / RECORDS).write_bytes(b"".join(lines) + b"not json\n")
    reader = RunReader(tmp_path)
    first = reader.read()
    assert len(first.records) == 3000 and first.problems == [f"{tmp_path / RECORDS}:3001: not valid JSON "
                                                             "(Expecting value: line 1 column 1 (char 0)); ignored"]
    append_once(tmp_path, _record("new"))
    before = _bytes_read()
    again = reader.read()
    assert _bytes_read() - before < 8_000
    assert [r.key for r in again.records] == [*(f"k{i}" for i in range(3000)), "new"]
    assert again.problems == first.problems
    (tmp_path / RECORDS).write_bytes(b"".join(lines[1:]) + lines[0])  # the same bytes, another order and end
    assert [r.key for r in reader.read().records] == [*(f"k{i}" for i in range(1, 3000)), "k0"]
    assert reader.read().records == read_records(tmp_path).records
