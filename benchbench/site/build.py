"""Writing the site: Jinja2 templates (autoescaped) rendered to files, the assets and downloads beside them, the previous site replaced whole.

The site is built in a temporary folder beside its place and swapped in; the folder it replaces must
hold only what an earlier build wrote (listed in its `.benchbench-site`): anything else (a run
written into the site, someone's files) is never deleted, the build refuses in one line instead, as
it does for the current folder, a symbolic link, and a folder holding the runs it reads.

Everything a page needs lies in the site folder (no server, no network, no CDN), every link is
relative, and the bytes depend only on the runs, the paths the command was given and the registered
models: no build time, no absolute path but one given, stable order. A run's path is shown as the
command named it, so that the commands a page prints run from the folder `benchbench report` ran in.
So a published site can be checked against a fresh build.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from benchbench.store.atomic import output_errors
from benchbench.errors import BenchError
from benchbench.site.cells import breakable, html_table, number, show
from benchbench.site.comparison import Comparison, default_pairs
from benchbench.site.runs import Run, find_run_dirs, read_run
from benchbench.store.rundir import ENV, RECORDS, SITE_MARKER

if TYPE_CHECKING:
    from benchbench.projection.catalog import Targets


ASSETS = ("site.css", "site.js", "favicon.svg")


@dataclass
class Site:
    """What was written, for the command's summary."""

    out: Path
    runs: list[Run] = field(default_factory=list)
    comparisons: list[Comparison] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # paths without runs
    pages: list[str] = field(default_factory=list)
    verifications: list = field(default_factory=list)  # site.verify_page.Verification, a reference table each


def environment():
    import jinja2

    return jinja2.Environment(loader=jinja2.PackageLoader("benchbench.site", "templates"),
                              autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True,
                              lstrip_blocks=True, keep_trailing_newline=True)


def build_site(paths: list[Path], out: Path, *, models, pairs: list[tuple[Path, Path]] = (),
               threshold: float = 5.0, roots_shown: list[str] | None = None, catalog=None,
               project_to: Targets | None = None) -> Site:
    """Render the runs under `paths` (and the runs of `pairs`), their comparisons, the reference tables of
    the paths' `references/` folders checked against the runs, and the model zoo of `models` (a registry)
    into `out`. Without `pairs`, each run is compared with the run before it
    that shares a cell with it. `catalog` (the plugins' models and datasets) projects the cells of reference
    rows that name a device; None leaves those rows unmatched. `project_to` (benchbench.projection.catalog.Targets,
    needs `catalog`): each run's compute table gains a column of its cells' device-days projected on each device."""
    out = Path(out)
    _check_out(out, [Path(p) for p in paths] + [Path(p) for pair in pairs for p in pair])
    site = Site(out)
    taken: set[str] = set()
    found, site.notes = find_run_dirs([Path(p) for p in paths])
    site.runs = [read_run(d, root, taken) for d, root in found]
    site.comparisons = _comparisons(site, pairs, threshold, taken)
    site.verifications = _verifications(paths, site.runs, catalog)

    tmp = out.absolute().with_name(f".{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        with output_errors(out):  # a full disk, a read-only folder: one line, and the old site is whole
            written = _render(tmp, site, models, roots_shown or [str(p) for p in paths],
                              _compute_columns(site.runs, catalog, project_to))
            (tmp / SITE_MARKER).write_text("\n".join([MARKER_HEAD, *sorted(written)]) + "\n")
            _swap(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return site


MARKER_HEAD = ("Written by `benchbench report`; the next build replaces the files below, and refuses to run "
               "while this folder holds anything else:")


def _compute_columns(runs: list[Run], catalog, project_to: Targets | None):
    """(run, compute table, its frame) -> the table with a column per device of `project_to` (Targets): its ok
    cells' device-days projected there (benchbench.judge.projected); None without devices to project to."""
    if not project_to:
        return None
    if catalog is None:
        raise BenchError("projecting onto a device needs the plugins' catalog (build_site(catalog=...))")
    from benchbench.judge.projected import projector
    from benchbench.report.tables import projected_onto

    project = projector(catalog, {run.slug: (run.last, run.env) for run in runs}, project_to.described)
    return lambda run, table, df: projected_onto(table, df, project, run.slug, list(project_to.devices))


def _render(tmp: Path, site: Site, models, roots: list[str], compute_columns=None) -> list[str]:
    """The site's files, written under `tmp`; returns their paths relative to it. `compute_columns` (see
    `_compute_columns`) adds to each run's compute table."""
    from benchbench import __version__
    from benchbench.report.plots import family_styles
    from benchbench.site.history_page import METRICS as HISTORY_METRICS, history_groups, regressions_table
    from benchbench.site.run_page import run_page
    from benchbench.site.zoo import zoo_rows

    env = environment()
    env.globals.update(version=__version__, show=show)
    env.filters.update(breakable=breakable, number=number)
    (tmp / "assets").mkdir(parents=True)
    for name in ASSETS:
        (tmp / "assets" / name).write_bytes(resources.files("benchbench.site").joinpath("static", name).read_bytes())
    styles = family_styles(models)

    def page(name: str, template: str, **context) -> None:
        # a path that is not UTF-8 (bytes a file system allows) is shown with its odd bytes escaped
        (tmp / name).write_text(env.get_template(template).render(page_name=name, **context), encoding="utf-8",
                                errors="backslashreplace")
        site.pages.append(name)

    page("index.html", "index.html", runs=site.runs, notes=site.notes, roots=roots,
         runs_table=_runs_table(site.runs), comparisons=site.comparisons)
    for run in site.runs:
        view = run_page(run, styles, compute_columns)
        folder = tmp / "downloads" / run.slug
        folder.mkdir(parents=True)
        for name in (RECORDS, ENV):
            if (run.path / name).is_file():
                shutil.copyfile(run.path / name, folder / name)
        for t in view.tables:
            for (_, file_name), text in zip(t.downloads, t.files.values()):
                (tmp / "downloads" / file_name).write_text(text, encoding="utf-8", errors="backslashreplace")
        page(f"run-{run.slug}.html", "run.html", run=run, view=view,
             copied=[n for n in (RECORDS, ENV) if (folder / n).is_file()])
    for c in site.comparisons:
        page(f"compare-{c.slug}.html", "compare.html", c=c, table=html_table(
            "table-comparison", f"{c.b.label} against {c.a.label}", c.columns, c.rows, flagged=c.flagged))
    page("comparisons.html", "comparisons.html", comparisons=site.comparisons, runs=site.runs,
         table=_comparisons_table(site.comparisons))
    groups = history_groups(site.runs)
    page("history.html", "history.html", groups=groups, runs=site.runs, metrics=HISTORY_METRICS,
         table=regressions_table(groups))
    page("verify.html", "verify.html", verifications=site.verifications, runs=site.runs, roots=roots)
    rows = zoo_rows(models)
    page("zoo.html", "zoo.html", zoo=html_table(
        "table-zoo", "Every registered model, at its default resolution, 1000 classes",
        ["Id", "Name", "Family", "Params", "GMACs", "Resolution (px)", "Plugin"],
        [[r.id, r.name, r.family, r.params, None if r.gmacs is None else float(f"{r.gmacs:.4g}"), r.resolution,
          r.plugin] for r in rows]), families=sorted({r.family for r in rows}), count=len(rows))
    return [str(p.relative_to(tmp)) for p in tmp.rglob("*") if p.is_file()] + [SITE_MARKER]


def _verifications(paths, runs: list[Run], catalog) -> list:
    """The reference tables in a `references/` folder of each path, checked against `runs` (the cells of
    rows naming a device projected with `catalog`)."""
    from benchbench.site.verify_page import find_references, verifications

    return verifications(find_references([Path(p) for p in paths]), runs, catalog)


def _swap(tmp: Path, out: Path) -> None:
    """`tmp` in the place of `out`; the old site (only files an earlier build wrote: `_check_out`) goes."""
    if not out.exists():
        os.replace(tmp, out)
        return
    old = out.absolute().with_name(f".{out.name}.old-{os.getpid()}")
    os.replace(out, old)
    try:
        os.replace(tmp, out)
    except OSError:
        os.replace(old, out)  # the old site back as it was
        raise
    shutil.rmtree(old)


def _written_before(out: Path) -> set[str] | None:
    """The files the last build wrote into `out`, from its marker; None for a marker of an older version,
    which lists none (its files are then known by their places: assets/, downloads/, top-level pages)."""
    lines = (out / SITE_MARKER).read_text(errors="replace").splitlines()
    return set(lines[1:]) if lines and lines[0] == MARKER_HEAD else None


def _ours(relative: Path, listed: set[str] | None) -> bool:
    if listed is not None:
        return str(relative) in listed
    parts = relative.parts
    return (parts[0] in ("assets", "downloads") or (len(parts) == 1 and relative.suffix == ".html")
            or str(relative) == SITE_MARKER)


def _check_out(out: Path, inputs: list[Path]) -> None:
    """One line, before any work, for an output folder the site must not replace: a link, the current
    folder or one above it, a folder holding the runs reported, a file, or a folder holding anything
    a build did not write there (a run written into a site, someone's files)."""
    if out.is_symlink():
        raise BenchError(f"-o {out}: a symbolic link (to {os.readlink(out)}); name the folder itself (the site "
                         "replaces its folder whole, and must not reach through a link)")
    here, target = Path.cwd().resolve(), out.resolve()
    if target == here or target in here.parents:
        raise BenchError(f"-o {out}: the current folder{'' if target == here else ' or one above it'}; the site "
                         "replaces its folder whole: name a folder of its own, e.g. -o site")
    for path in inputs:
        if target == path.resolve() or target in path.resolve().parents:
            raise BenchError(f"-o {out}: holds {path}, which this report reads; name a folder outside it, "
                             f"e.g. -o {path}/site")
    if not out.exists():
        return
    if not out.is_dir():
        raise BenchError(f"-o {out}: a file is in the way (not a folder); name a new or empty folder")
    if not any(out.iterdir()):
        return
    if not (out / SITE_MARKER).is_file():
        raise BenchError(f"-o {out}: exists and is not a site benchbench report wrote (no {SITE_MARKER} in it); "
                         "choose a new or empty folder")
    listed = _written_before(out)
    for path in sorted(out.rglob("*")):
        if (path.is_file() or path.is_symlink()) and not _ours(path.relative_to(out), listed):
            raise BenchError(f"-o {out}: holds {path}, which benchbench report did not write (a run written into "
                             "the site?); the next build would delete it: move it out, or choose another folder")


def _comparisons(site: Site, pairs, threshold: float, taken: set[str]) -> list[Comparison]:
    from benchbench.site.comparison import compare_runs

    from benchbench.judge.rule import Rules

    Rules(threshold=threshold).check()  # compare's --threshold, in points: a BenchError out of range
    by_path = {r.path.resolve(): r for r in site.runs}

    def run_of(path: Path) -> Run:
        path = Path(path)
        if not (path / RECORDS).is_file():
            raise BenchError(f"--compare {path}: not a run directory (no {RECORDS}); pass results/<suite>/<run-id>")
        if path.resolve() not in by_path:
            by_path[path.resolve()] = read_run(path, path.parent.parent, taken)
            site.runs.append(by_path[path.resolve()])
        return by_path[path.resolve()]

    chosen = [(run_of(a), run_of(b)) for a, b in pairs] if pairs else default_pairs(site.runs)
    slugs: set[str] = set()
    out = []
    for a, b in chosen:
        slug = f"{a.slug}--vs--{b.slug}"
        while slug in slugs:
            slug += "-again"
        slugs.add(slug)
        out.append(compare_runs(a, b, slug, threshold))
    return out


def short_commit(commit: str) -> str:
    dirty = commit.endswith("-dirty")
    return (commit[:-6] if dirty else commit)[:12] + ("-dirty" if dirty else "")


def _runs_table(runs: list[Run]):
    return html_table("table-runs", "Every run, by suite and run id",
                      ["Run", "Suite", "Date", "Device", "Git commit", "Cells done", "Cells failed", "Problems"],
                      [[r.label, r.suite, r.date, r.device or "-", short_commit(r.git_commit) or "-", r.done, r.failed,
                        len(r.problems)] for r in runs],
                      links=[f"run-{r.slug}.html" for r in runs])


def _comparisons_table(comparisons: list[Comparison]):
    return html_table("table-comparisons", "Run against run: B judged against the baseline A",
                      ["Comparison", "A (baseline)", "B", "Rows", "Regressions"],
                      [[f"{c.b.label} vs {c.a.label}", c.a.label, c.b.label, len(c.rows) if not c.error else "-",
                        c.regressions if not c.error else "-"] for c in comparisons],
                      links=[f"compare-{c.slug}.html" for c in comparisons])
