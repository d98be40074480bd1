"""The driver's writer for `benchbench run --db URL`: each record goes to the database as it lands
(the driver writes, whatever the executor: workers need no credentials). The database is a copy:
when it cannot be opened or written, the run goes on, one warning says so, and the database is left
alone for the rest of the run (`benchbench db ingest RUN_DIR` catches up later)."""

from __future__ import annotations

import sys
from typing import Callable

from benchbench.db.connect import Database, open_database
from benchbench.db.ingest import insert_records
from benchbench.errors import BenchError
from benchbench.record import Record


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class LiveWriter:
    """`write(record)` inserts one record (idempotently); the first failure warns through `warn` and
    turns the writer off."""

    def __init__(self, url: str, run_dir: str = "", warn: Callable[[str], None] = _stderr):
        self.url, self.run_dir, self.warn = url, run_dir, warn
        self.db: Database | None = None
        self.failed = False
        self.written = 0

    def _give_up(self, error: Exception | str) -> None:
        self.failed = True
        self.warn(f"warning: {error}; the run goes on, writing records to its JSONL only; load them later with "
                  f"`benchbench db ingest {self.run_dir or 'RUN_DIR'} --db URL`")
        self.close()

    def open(self) -> "LiveWriter":
        try:
            self.db = open_database(self.url, write=True)
        except BenchError as error:
            self._give_up(error)
        return self

    def write(self, record: Record) -> None:
        if self.failed:
            return
        if self.db is None:
            self.open()
            if self.failed:
                return
        try:
            self.written += insert_records(self.db, [record], self.run_dir)
        except Exception as error:  # noqa: BLE001 - the database is a copy: nothing of it may stop the run
            self._give_up(error if isinstance(error, BenchError) else f"results database: {type(error).__name__}: "
                          f"{error}")

    def close(self) -> None:
        if self.db is not None:
            self.db.close()
            self.db = None
