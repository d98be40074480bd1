"""`benchbench db dump DIR` and the temporary folder `.<DIR>.dump-partial` beside DIR (issue 44, item 11):
a leftover one is removed only where it carries the dump's mark; a folder of that name without it is
the user's, kept whole, and the dump is refused in one line naming it and the way out."""

from __future__ import annotations

from pathlib import Path

from benchbench.cli import main
from benchbench.store.rundir import RECORDS

MARK = ".benchbench-dump-partial"  # as benchbench.cli.db_cmd.PARTIAL_MARK


def _cli(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def _database(report_runs, tmp_path, capsys) -> str:
    url = f"sqlite:///{tmp_path / 'b.db'}"
    assert _cli(capsys, "db", "ingest", report_runs.root, "--db", url)[0] == 0
    return url


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_folder_of_the_partial_name_without_the_mark_is_kept_and_the_dump_refused(report_runs, tmp_path, capsys):
    url = _database(report_runs, tmp_path, capsys)
    out = tmp_path / "dump"
    theirs = tmp_path / ".dump.dump-partial"
    (theirs / "notes").mkdir(parents=True)
    (theirs / "thesis.tex").write_text("three years of work\n")
    (theirs / "notes" / "a.txt").write_bytes(b"\x00\x01")
    before = _tree(theirs)
    code, stdout, err = _cli(capsys, "db", "dump", out, "--db", url)
    assert theirs.is_dir() and _tree(theirs) == before  # the user's files, every byte
    assert code == 2 and stdout == "" and err.count("\n") == 1 and "Traceback" not in err, err
    assert f"db dump {out}: {theirs} exists and is not a dump's temporary folder (it has no {MARK} inside)" in err
    assert "move or rename it, or name another DIR" in err
    assert not out.exists()


def test_a_file_of_the_partial_name_is_kept_and_the_dump_refused(report_runs, tmp_path, capsys):
    url = _database(report_runs, tmp_path, capsys)
    theirs = tmp_path / ".dump.dump-partial"
    theirs.write_text("mine\n")
    code, _, err = _cli(capsys, "db", "dump", tmp_path / "dump", "--db", url)
    assert code == 2 and err.count("\n") == 1 and f"{theirs} exists and is not a dump's temporary folder" in err, err
    assert theirs.read_text() == "mine\n"


def test_a_marked_leftover_is_removed_and_the_dump_marks_its_own(report_runs, tmp_path, capsys, monkeypatch):
    url = _database(report_runs, tmp_path, capsys)
    out = tmp_path / "dump"
    partial = tmp_path / ".dump.dump-partial"
    (partial / "s" / "r").mkdir(parents=True)
    (partial / MARK).touch()
    (partial / "s" / "r" / RECORDS).write_text("{}\n")
    # the dump's own temporary folder carries the mark while its runs are written
    from benchbench.cli import db_cmd

    seen = []
    write_runs = db_cmd._write_runs

    def watching(folder, runs, dest):
        seen.append((folder, (folder / MARK).is_file()))
        return write_runs(folder, runs, dest)

    monkeypatch.setattr(db_cmd, "_write_runs", watching)
    code, stdout, err = _cli(capsys, "db", "dump", out, "--db", url)
    assert code == 0 and "15 records of 4 runs written" in stdout and "did not finish" in err, err
    assert seen == [(partial, True)]
    assert not partial.exists() and not (out / MARK).exists() and len(list(out.glob("*/*/" + RECORDS))) == 4
