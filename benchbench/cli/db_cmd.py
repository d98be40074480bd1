"""`benchbench db ingest PATH... | query [filters] | dump DIR | info`, on `--db URL` (default: the SQLite
database `<results root>/benchbench.db`). docs/results-db.md."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from benchbench.choices import TABLE_FORMATS, TABLE_LAYOUTS
from benchbench.errors import BenchError
from benchbench.text import plural

DEFAULT_RESULTS = "runs"  # as `benchbench run --results`


def db_options() -> argparse.ArgumentParser:
    """--db and --results, shared by `db`, `history` and `run`."""
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("results database")
    g.add_argument("--db", metavar="URL",
                   help="the results database: sqlite:///PATH or postgresql+psycopg://USER@HOST/NAME "
                        "(default: sqlite:///<--results>/benchbench.db)")
    g.add_argument("--results", default=DEFAULT_RESULTS, metavar="ROOT",
                   help=f"the results root whose benchbench.db is the default database (default: {DEFAULT_RESULTS})")
    return p


def db_url(args: argparse.Namespace) -> str:
    from benchbench.db.connect import default_url

    return args.db or default_url(Path(args.results))


def add_parser(sub, parent) -> None:
    p = sub.add_parser("db", parents=[parent], help="the results database: ingest runs, query records")
    commands = p.add_subparsers(dest="db_command", required=True, metavar="COMMAND")
    options = db_options()
    ingest = commands.add_parser("ingest", parents=[parent, options],
                                 help="load the records of run directories (or every run under a results root)")
    ingest.add_argument("paths", nargs="+", metavar="RUN_DIR_OR_ROOT")
    ingest.add_argument("--jobs", type=int, metavar="N",
                        help="processes reading runs (default, for records of 16 MiB or more: one per CPU free "
                             "of other processes' load, up to 8, within --threads; else 1)")
    ingest.set_defaults(func=run_ingest)
    query = commands.add_parser("query", parents=[parent, options], help="print records as a table")
    for flag, dest in (("--model", "models"), ("--dataset", "datasets"), ("--protocol", "protocols"),
                       ("--run", "runs"), ("--status", "statuses")):
        query.add_argument(flag, dest=dest, action="append", default=[], metavar="ID",
                           help=f"only these (repeatable){' : ok | failed' if dest == 'statuses' else ''}")
    query.add_argument("--since", metavar="TIME", help="finished at or after (ISO date or time, UTC)")
    query.add_argument("--until", metavar="TIME", help="finished before (ISO date or time, UTC)")
    query.add_argument("--setting", action="append", default=[], metavar="NAME=VALUE",
                       help="only records with this setting (repeatable), e.g. lr=0.001")
    query.add_argument("--format", "-f", choices=TABLE_FORMATS, default="markdown")
    query.add_argument("--layout", "-l", choices=TABLE_LAYOUTS, default="summary",
                       help="as `benchbench table` (default: summary, a row per record)")
    query.set_defaults(func=run_query)
    dump = commands.add_parser("dump", parents=[parent, options],
                               help="write the database's records back as run directories (e.g. to build the site "
                                    "from: benchbench report DIR -o SITE)")
    dump.add_argument("out", metavar="DIR", help="a new or empty folder: DIR/<suite>/<run-id>/records.jsonl (a suite or run id that is not a "
                           "plain folder name gets a safe one, with a warning)")
    dump.add_argument("--run", dest="runs", action="append", default=[], metavar="RUN_ID", help="only these runs")
    dump.set_defaults(func=run_dump)
    info = commands.add_parser("info", parents=[parent, options], help="the database's schema version and rows")
    info.set_defaults(func=run_info)


def run_ingest(args) -> int:
    from benchbench.db.connect import open_database
    from benchbench.db.ingest import ingest, run_dirs

    dirs = run_dirs(args.paths)  # a path that names no run fails before the database is touched
    db = open_database(db_url(args), write=True)
    try:
        result = ingest(db, dirs, args.jobs)
    finally:
        db.close()
    for problem in result.problems:
        print(f"warning: {problem}", file=sys.stderr)
    same = result.read - result.added - result.updated - result.skipped
    print(f"{db.where}: {plural(result.read, 'record')} of {plural(result.runs, 'run')} read, {result.added:,} added, "
          f"{result.updated:,} updated, {same:,} already there"
          + (f", {result.skipped:,} not stored (see the warnings)" if result.skipped else ""))
    return 0


def run_query(args) -> int:
    from dataclasses import replace

    from benchbench.store import results
    from benchbench.db.connect import open_database
    from benchbench.db.query import Filters, parse_setting, parse_time, select_runs
    from benchbench.report.tables import build_table, render, with_provenance

    filters = Filters(models=tuple(args.models), datasets=tuple(args.datasets), protocols=tuple(args.protocols),
                      runs=tuple(args.runs), statuses=tuple(args.statuses),
                      since=parse_time(args.since, "--since") if args.since else None,
                      until=parse_time(args.until, "--until") if args.until else None,
                      settings=tuple(parse_setting(s) for s in args.setting))
    bad = [s for s in args.statuses if s not in ("ok", "failed")]
    if bad:
        raise BenchError(f"--status {bad[0]!r}: allowed: ok, failed")
    db = open_database(db_url(args), write=False)
    try:
        found = [replace(r, suite=suite, run_id=run_id) for suite, run_id, r in select_runs(db, filters)]
    finally:
        db.close()
    if not found:
        raise BenchError(f"{db.where}: no records match")
    sys.stdout.write(render(with_provenance(build_table(results.frame(found), args.layout)), args.format))
    return 0


def run_info(args) -> int:
    from sqlalchemy import func, select

    from benchbench.db.connect import db_errors, open_database
    from benchbench.db.migrate import version_of
    from benchbench.db.schema import records

    db = open_database(db_url(args), write=False)
    try:
        with db_errors(db.where), db.engine.connect() as conn:
            version = version_of(conn)
            rows = conn.execute(select(func.count()).select_from(records)).scalar_one()
            runs = conn.execute(select(func.count(func.distinct(records.c.run_id)))).scalar_one()
    finally:
        db.close()
    print(f"{db.where}: schema {version}, {plural(rows, 'record')} of {plural(runs, 'run')}")
    return 0


PARTIAL_MARK = ".benchbench-dump-partial"  # inside a dump's temporary folder: ours to remove; never removed without it


def run_dump(args) -> int:
    """The records, grouped by run, written into a temporary folder beside DIR that becomes DIR at the end
    (or whose runs are moved into an empty DIR): a dump that fails (a full disk) or is killed leaves DIR as
    it was, and running it again works."""
    from benchbench.db.connect import open_database
    from benchbench.db.query import Filters, select_runs
    from benchbench.store.rundir import check_directory

    out = Path(os.path.abspath(args.out))
    check_directory(out, "dump folder")
    if out.is_dir() and any(out.iterdir()):
        raise BenchError(f"{out}: not empty; name a new or empty folder (runs are written whole, never merged)")
    partial = out.parent / f".{out.name}.dump-partial"
    _clear_partial(partial, out)  # before the database is read: a folder of that name not ours is refused
    db = open_database(db_url(args), write=False)
    try:
        found = select_runs(db, Filters(runs=tuple(args.runs), by_row=True))
    finally:
        db.close()
    if not found:
        raise BenchError(f"{db.where}: no records" + (f" of run {', '.join(args.runs)}" if args.runs else ""))
    runs: dict[tuple[str, str], list] = {}
    for suite, run_id, record in found:
        runs.setdefault((suite or "unnamed", run_id), []).append(record)
    target = None  # where this dump writes, once it has a place: its own marked folder, or DIR itself
    try:
        target = _make_partial(partial, out)
        written = _write_runs(target, runs, out)
        if target != out:
            (target / PARTIAL_MARK).unlink()
            if out.is_dir():  # an empty folder (perhaps someone's working directory): filled, not replaced
                for child in target.iterdir():
                    os.rename(child, out / child.name)
                target.rmdir()
            else:
                os.rename(target, out)
    except OSError as error:
        _remove_dump(target, out)
        raise BenchError(f"db dump {out}: cannot write: {error.strerror or error}; nothing was left in {out}: free "
                         "space (or name another folder), then run the same command again") from None
    except BaseException:
        _remove_dump(target, out)
        raise
    print(f"{out}: {plural(written, 'record')} of {plural(len(runs), 'run')} written from {db.where}")
    return 0


def _write_runs(folder: Path, runs: dict, out: Path) -> int:
    """Each run's records as folder/<suite>/<run-id>/records.jsonl (to be `out`/...), one write and fsync a
    run; a record that cannot be written as a line is left out with a warning. The number written."""
    from benchbench.db.pathnames import folder_name, inside
    from benchbench.store.rundir import RECORDS, RecordLineError, record_line

    written = 0
    for (suite, run_id), recs in runs.items():
        # The names come from the records: each becomes one folder name inside DIR, whatever it holds.
        folders = folder_name(suite), folder_name(run_id)
        run_dir = inside(folder, *folders)
        for what, name, shown in (("suite", suite, folders[0]), ("run id", run_id, folders[1])):
            if shown != name:
                print(f"warning: {what} {name!r} ({plural(len(recs), 'record')}) is not a plain folder name: "
                      f"written to {out.joinpath(*folders)}", file=sys.stderr)
        lines = []
        for record in recs:
            try:
                lines.append(record_line(record))
            except RecordLineError as error:
                print(f"warning: a record of cell {record.key} of run {run_id!r}: {error}; left out", file=sys.stderr)
        run_dir.mkdir(parents=True, exist_ok=True)
        with open(run_dir / RECORDS, "xb") as f:
            f.write(b"".join(lines))
            f.flush()
            os.fsync(f.fileno())
        written += len(lines)
    return written


def _clear_partial(partial: Path, out: Path) -> None:
    """The temporary folder of a dump that was killed: removed where it has our mark (or, killed between
    making and marking it, holds nothing). Anything else of that name is someone's: kept, and the dump
    refused in one line."""
    if not (partial.exists() or partial.is_symlink()):
        return
    try:
        if partial.is_dir() and not partial.is_symlink():
            if (partial / PARTIAL_MARK).is_file():
                shutil.rmtree(partial)
                print(f"note: removed {partial}, left by a dump that did not finish", file=sys.stderr)
                return
            if not any(partial.iterdir()):
                partial.rmdir()
                return
    except OSError as error:
        raise BenchError(f"db dump {out}: cannot remove {partial}, left by a dump that did not finish: "
                         f"{error.strerror or error}; remove it, then run the same command again") from None
    raise BenchError(_not_ours(partial, out))


def _not_ours(partial: Path, out: Path) -> str:
    return (f"db dump {out}: {partial} exists and is not a dump's temporary folder (it has no {PARTIAL_MARK} "
            "inside), so it is kept: move or rename it, or name another DIR, then run the command again")


def _make_partial(partial: Path, out: Path) -> Path:
    """The folder the dump writes into: its temporary folder, made by it and marked; where DIR's folder
    is read-only, DIR itself if it exists (it is empty)."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        partial.mkdir()
    except FileExistsError:
        if partial.exists() or partial.is_symlink():  # made since _clear_partial looked: not ours
            raise BenchError(_not_ours(partial, out)) from None
        raise
    except OSError:
        if not out.is_dir():
            raise
        return out
    try:
        (partial / PARTIAL_MARK).touch()
    except OSError:
        partial.rmdir()  # made by this dump a moment ago, and empty
        raise
    return partial


def _remove_dump(target: Path | None, out: Path) -> None:
    """What a failed dump wrote: its temporary folder, or (written into DIR itself) DIR's contents, which
    were none when it began; nothing where it had made no place yet."""
    if target is None:
        return
    if target != out:
        shutil.rmtree(target, ignore_errors=True)
        return
    for child in out.iterdir() if out.is_dir() else ():
        shutil.rmtree(child, ignore_errors=True) if child.is_dir() else child.unlink(missing_ok=True)
