"""The driver's writer for `benchbench run --db URL`: each record goes to the database as it lands
(the driver writes, whatever the executor: workers need no credentials). The database is a copy:
when it cannot be opened or written, the run goes on, one warning says so, and the database is left
alone for the rest of the run (`benchbench db ingest RUN_DIR` catches up later, as does the run's
next resume with --db).

On opening, the writer catches up: records of the run that the database lacks (a run stopped while
a record was on its way to it, a run made without --db, a database that was down) are ingested
first. It costs one count of the run's rows when nothing is missing. A database wait never holds a
Ctrl-C (benchbench.db.connect.begin_immediate), so a run stops at once; what it had not written is
caught up on resume.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Callable

from sqlalchemy import func, select

from benchbench.db.connect import Database, db_errors, open_database
from benchbench.db.ingest import Written, insert_records
from benchbench.db.rows import text
from benchbench.db.schema import records
from benchbench.errors import BenchError
from benchbench.store.record import Record
from benchbench.store.rundir import read_records, record_line
from benchbench.text import plural


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class LiveWriter:
    """`write(record)` inserts one record (idempotently); the first failure warns through `warn` and
    turns the writer off. `open(recorded)` catches up with the run's `recorded` records first."""

    def __init__(self, url: str, run_dir: str = "", warn: Callable[[str], None] = _stderr, suite: str = ""):
        self.url, self.run_dir, self.warn, self.suite = url, run_dir, warn, suite
        self.db: Database | None = None
        self.failed = False
        self.written = 0

    def _give_up(self, error: Exception | str) -> None:
        self.failed = True
        self.warn(f"warning: {error}; the run goes on, writing records to its JSONL only; load them later with "
                  f"`benchbench db ingest {self.run_dir or 'RUN_DIR'} --db URL`")
        self.close()

    def _fault(self, error: Exception) -> None:
        self._give_up(error if isinstance(error, BenchError) else f"results database: {type(error).__name__}: {error}")

    def open(self, recorded: int | None = None) -> "LiveWriter":
        """Open the database; with `recorded` (the run's records in its JSONL, from its index), first add
        those the database lacks."""
        try:
            self.db = open_database(self.url, write=True)
            if recorded and self.run_dir:
                self._catch_up(recorded)
        except Exception as error:  # noqa: BLE001 - the database is a copy: nothing of it may stop the run
            self._fault(error)
        return self

    def _catch_up(self, recorded: int) -> None:
        """The run's records into the database where it holds fewer rows of the run (its suite and run id)
        than the JSONL has records; the insert is idempotent, so only the missing ones are added."""
        run_dir = Path(self.run_dir)
        with db_errors(self.db.where), self.db.engine.connect() as conn:
            have = conn.execute(select(func.count()).select_from(records).where(  # names as rows hold them
                records.c.suite == text(self.suite), records.c.run_id == text(run_dir.name))).scalar_one()
        if have >= recorded:
            return
        written = insert_records(self.db, read_records(run_dir, missing_ok=True).records, self.run_dir)
        self._report(written)
        if written.added or written.updated:
            self.warn(f"note: {self.db.where} lacked records of this run (a run stopped while writing them, or run "
                      f"without --db): {plural(written.added, 'record')} added now"
                      + (f", {written.updated:,} updated" if written.updated else ""))

    def _report(self, written: Written) -> None:
        for problem in written.problems:
            self.warn(f"warning: {problem}")

    def write(self, record: Record) -> None:
        if self.failed:
            return
        if self.db is None:
            self.open()
            if self.failed:
                return
        try:
            # the record as its line reads back, as an ingest of the run reads it: the same row, never an "edit"
            line = Record.from_json(json.loads(record_line(record)))
            written = insert_records(self.db, [line], self.run_dir)
        except Exception as error:  # noqa: BLE001 - the database is a copy: nothing of it may stop the run
            self._fault(error)
            return
        self.written += written.added
        self._report(written)

    def close(self) -> None:
        if self.db is not None:
            self.db.close()
            self.db = None
