"""`benchbench report`: the static site from runs of every kind, validated as HTML; its numbers are the
tables', the comparison's and the model counters'; bad input gives pages that say so, never a crash."""

from __future__ import annotations

import ast
import re
import shutil
import statistics
from pathlib import Path

import pytest

from benchbench.cli import main

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def site(report_site):
    """The site of conftest's report runs, built once for this module: tests here only read it."""
    return report_site.site


def _rows(html: str, table_id: str) -> list[list[str]]:
    """The body rows of one table as cell texts (tags stripped)."""
    body = re.search(rf'<table id="{table_id}".*?<tbody>(.*?)</tbody>', html, re.S).group(1)
    return [[re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row, re.S)]
            for row in re.findall(r"<tr[^>]*>(.*?)</tr>", body, re.S)]


def test_every_page_is_valid_html_and_every_link_resolves(site, check_site):
    pages = check_site(site)
    assert {"index.html", "zoo.html", "comparisons.html", "history.html", "run-tiny-20260101-000000.html",
            "run-broken-20260103-000000.html", "run-torn-20260104-000000.html", "run-empty-20260105-000000.html",
            "compare-tiny-20260101-000000--vs--tiny-20260102-000000.html"} <= set(pages)
    # Every asset is in the site: a stylesheet, a script, an icon; nothing from the network.
    assert sorted(p.name for p in (site / "assets").iterdir()) == ["favicon.svg", "site.css", "site.js"]
    assert not re.search(r"https?://", "".join(p.read_text() for p in site.glob("*.html")).replace(
        "http://www.w3.org/", ""))


def test_index_counts_cells_done_and_failed_and_problems(site, report_site):
    report_runs = report_site.runs
    html = (site / "index.html").read_text()
    rows = {r[0]: r for r in _rows(html, "table-runs")}
    # Run, Suite, Date, Device, Git commit, Cells done, Cells failed, Problems: as constructed.
    assert rows["tiny/20260101-000000"][1:] == ["tiny", "2026-01-01 00:00", "Test CPU (2 threads)", "0123456789ab",
                                                "6", "0", "0"]
    assert [rows[r][5:] for r in ("tiny/20260102-000000", "broken/20260103-000000", "torn/20260104-000000",
                                  "empty/20260105-000000")] == [["6", "0", "0"], ["0", "2", "0"], ["1", "0", "2"],
                                                                ["0", "0", "1"]]
    assert f"{report_runs.nothing}: no run here" in html


def test_bad_runs_get_pages_that_say_so(site):
    failed = (site / "run-broken-20260103-000000.html").read_text()
    assert "Every cell of this run failed (2 cells)" in failed
    # The error in the cells table, the traceback folded in a <details>.
    assert re.search(r'<details class="traceback">\s*<summary>Traceback</summary>\s*<pre>Traceback \(most recent call '
                     r'last\):.*RuntimeError: boom vit-a</pre>', failed, re.S)
    assert "failed: RuntimeError: boom" in failed
    torn = (site / "run-torn-20260104-000000.html").read_text()
    assert "torn/20260104-000000/records.jsonl:2: not valid JSON" in torn
    assert "torn/20260104-000000/records.jsonl:3: torn last line" in torn
    empty = (site / "run-empty-20260105-000000.html").read_text()
    assert "This run has no readable records" in empty and "env.json: missing" in empty


def test_a_folder_without_runs_gives_an_index_that_says_so(tmp_path, report_models):
    from benchbench.site.build import build_site

    (tmp_path / "none").mkdir()
    build_site([tmp_path / "none"], tmp_path / "site", models=report_models)
    html = (tmp_path / "site" / "index.html").read_text()
    assert "0 runs found" in html and "no run here" in html and "No runs to show" in html


def test_run_page_tables_are_the_tables_and_downloads(site, report_site):
    from benchbench.store import results
    from benchbench.report.tables import build_table, render

    report_runs = report_site.runs
    html = (site / "run-tiny-20260101-000000.html").read_text()
    table = build_table(results.load(report_runs.base), "models")
    assert _rows(html, "table-models") == table.rows
    # Seeds aggregated as mean ± sample std, by hand: vit-a 80 and 82 -> 81.00 ± 1.41.
    assert _rows(html, "table-models")[0][3] == f"81.00 ± {statistics.stdev([80, 82]):.2f}" == "81.00 ± 1.41"
    downloads = site / "downloads" / "tiny-20260101-000000"
    assert (downloads / "models.csv").read_text() == render(table, "csv")
    assert (downloads / "models.tex").read_text() == render(table, "latex")
    assert (downloads / "records.jsonl").read_bytes() == (report_runs.base / "records.jsonl").read_bytes()
    # The suite's own layout first; every layout that applies has a section.
    layouts = re.findall(r'<h3 id="layout-([\w-]+)"', html)
    assert layouts[0] == "models" and set(layouts) == {"models", "summary", "paper-transfer", "paper-scaling",
                                                       "data-scaling", "compute", "intervals"}
    # Wilson intervals and the seed spread, apart, as the intervals layout builds them
    assert _rows(html, "table-intervals") == build_table(results.load(report_runs.base), "intervals").rows
    # The figure that applies inline, with its title; data-scaling needs a sweep of training-set sizes, and
    # every cell here trained on 600 images, so the page says why that figure is not drawn.
    assert html.count("<svg") == 1 and '<title>Accuracy against training-set size</title>' not in html
    assert "every cell trained on the same number of images (600)" in html
    assert 'data-sort="81.0">81.00 <span class="spread">± 1.41</span><' in html  # a mean ± std sorts by its mean


def test_comparison_highlights_exactly_the_regressions(site, report_site):
    from benchbench.store import results
    from benchbench.judge.compare import compare

    report_runs = report_site.runs
    html = (site / "compare-tiny-20260101-000000--vs--tiny-20260102-000000.html").read_text()
    flagged = re.findall(r'<tr class="flagged">(.*?)</tr>', html, re.S)
    rows = compare(results.load(report_runs.base), results.load(report_runs.regressed), 5.0)
    expected = rows[rows["regression"]]
    # Constructed: only vit-a lost 10 points of top-1 (both seeds: Welch's test calls it); nothing else moved.
    assert len(flagged) == len(expected) == 1
    assert "vit-a" in flagged[0] and "top1" in flagged[0]
    assert "1 regression," in html


def test_zoo_counts_match_the_published_fvcore_counts(catalog, zoo_cache):
    """The zoo's params and GMACs (meta device, torch's counter, 1000 classes) against what fvcore
    counted in the paper-compute run published in results/ (an independent counter; JFT-300M's 18,291
    classes): the runs' counts less the larger head, whose input is ViT-B's width 768 (the paper's
    Table 1) and ResNet-50's final 2048 channels."""
    import json

    from benchbench.registry import Registry
    from benchbench.site.zoo import zoo_rows

    classes = catalog.datasets.get("jft-300m").num_classes
    assert classes == 18291
    published = {}
    for line in (REPO / "results/paper-compute/20261123-020831/records.jsonl").read_text().splitlines():
        r = json.loads(line)
        published[r["model"]] = (r["metrics"]["params"], r["metrics"]["macs"])
    registry = Registry("model")
    for model_id in ("vit-b16", "bit-r50x1"):
        registry.add(catalog.models.get(model_id), catalog.models.plugin_of[model_id])
    rows = {r.id: r for r in zoo_rows(registry)}
    for model_id, head_in in (("vit-b16", 768), ("bit-r50x1", 2048)):
        params, macs = published[model_id]
        assert rows[model_id].params == params - (head_in + 1) * (classes - 1000)
        assert round(rows[model_id].gmacs * 1e9) == macs - head_in * (classes - 1000)


def test_zoo_page_lists_every_model_with_a_family_filter(site, report_models):
    html = (site / "zoo.html").read_text()
    rows = _rows(html, "table-zoo")
    assert [r[0] for r in rows] == sorted(s.id for s in report_models)
    assert re.search(r'<select data-filter-column="2">\s*<option value="">all</option>\s*<option>bit</option>\s*'
                     r'<option>vit</option>', html)


@pytest.mark.expected(seconds=8)  # default step, 2 cores: started first, so that none runs alone at its end
def test_the_build_is_deterministic_and_replaces_the_old_site(report_runs, report_models, tmp_path):
    from benchbench.site.build import build_site

    a, b = tmp_path / "a", tmp_path / "b"
    build_site([report_runs.root], a, models=report_models, roots_shown=["results"])
    (a / "stale.html").write_text("from an older build")  # a page an older build wrote, listed as written
    with open(a / ".benchbench-site", "a") as f:
        f.write("stale.html\n")
    build_site([report_runs.root], a, models=report_models, roots_shown=["results"])
    build_site([report_runs.root], b, models=report_models, roots_shown=["results"])
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert Path("stale.html") not in files
    assert files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    assert [f for f in files if (a / f).read_bytes() != (b / f).read_bytes()] == []
    # A site inside the results root is not read as runs (its downloads hold copies of records).
    # A site already there (a copy of `a`, its downloads holding copies of records) must be skipped when the
    # root is read: without a site there, this check could not fail.
    shutil.copytree(a, report_runs.root / "site", dirs_exist_ok=True)
    build_site([report_runs.root], report_runs.root / "site", models=report_models)
    assert "5 runs found" in (report_runs.root / "site" / "index.html").read_text()


def test_cli_refuses_a_missing_path_and_a_folder_it_did_not_write(tmp_path, capsys):
    assert main(["report", str(tmp_path / "nope"), "-o", str(tmp_path / "site")]) == 2
    assert "no such file or directory" in capsys.readouterr().err
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    assert main(["report", str(tmp_path), "-o", str(mine)]) == 2
    assert "not a site benchbench report wrote" in capsys.readouterr().err
    assert (mine / "notes.txt").read_text() == "keep me"


@pytest.mark.parametrize("text, sort, numeric", [
    ("88.55 ± 0.04", "88.55", True), ("0.00699 †", "0.00699", True), ("+1.20 pts", "1.2", True),
    ("x1.023", "1.023", True), ("60,000", "60000.0", True), ("1.3e-06", "1.3e-06", True), ("-", "", False),
    ("BiT-R20x1 (28px)", "BiT-R20x1 (28px)", False), ("failed", "failed", False)])
def test_cells_sort_by_their_number(text, sort, numeric):
    from benchbench.site.cells import cell

    c = cell(text)
    assert (float(c.sort) if numeric else c.sort) == (float(sort) if numeric else sort) and c.numeric == numeric


def test_report_command_imports_nothing_heavy_at_module_level():
    tree = ast.parse((REPO / "benchbench/cli/report_cmd.py").read_text())
    top = [n.module if isinstance(n, ast.ImportFrom) else a.name for n in tree.body
           if isinstance(n, (ast.Import, ast.ImportFrom)) for a in (n.names if isinstance(n, ast.Import) else [n])]
    assert not [m for m in top if m.split(".")[0] in ("jinja2", "pandas", "torch", "matplotlib", "markupsafe")
                or m.startswith("benchbench.site")], top


@pytest.mark.slow
@pytest.mark.expected(seconds=238)  # CI, 2 cores (.ci/run starts the longest first)
def test_published_site_is_what_the_command_writes_today(tmp_path, run_suite, zoo_cache):
    """results/site is `benchbench report results -o results/site --project-to h100,tpu-v3` of today's code and results (a new
    published run, or a change to the pages, means: run that command again and commit the site). Slow (about
    2 min in CI's slow step): what it guards, the published site byte for byte, needs the whole build, the
    zoo's ~110 models counted afresh on the meta device (this test run's cache starts empty)."""
    published = REPO / "results" / "site"
    proc = run_suite.cli("report", "results", "-o", tmp_path / "site", "--project-to", "h100,tpu-v3",
                         timeout=1800)  # counts ~110 models afresh
    assert proc.returncode == 0, proc.stderr
    fresh = tmp_path / "site"
    names = sorted(str(p.relative_to(fresh)) for p in fresh.rglob("*") if p.is_file())
    assert names == sorted(str(p.relative_to(published)) for p in published.rglob("*") if p.is_file())
    stale = [n for n in names if (fresh / n).read_bytes() != (published / n).read_bytes()]
    assert stale == [], f"results/site is stale in {stale}: run `benchbench report results -o results/site --project-to h100,tpu-v3`"


def test_the_pages_commands_run_from_the_folder_report_ran_in(report_runs, report_models, tmp_path, monkeypatch,
                                                              capsys):
    """The re-render hint, each figure's caption and a comparison's command name the runs by paths that
    work where `benchbench report results -o site` ran: every command they print runs there as printed
    (compare exits 1 on a regression, 2 on an error)."""
    import html
    import shlex
    from types import SimpleNamespace

    from benchbench.cli import report_cmd

    monkeypatch.setattr(report_cmd, "catalog", lambda args: SimpleNamespace(models=report_models))
    monkeypatch.chdir(report_runs.root.parent)
    assert main(["report", "results", "-o", "site"]) == 0
    page = (report_runs.root.parent / "site" / "run-tiny-20260101-000000.html").read_text()
    commands = [html.unescape(c) for c in re.findall(r"<code>(benchbench (?:table|plot) [^<]*)</code>", page)]
    assert [c.split()[1] for c in commands] == ["plot", "table"]  # the figure's caption, the hint
    for command in commands:
        argv = [arg if arg != "FILE.svg" else "figure.svg" for arg in shlex.split(command)[1:]]
        assert main(argv) == 0, (command, capsys.readouterr().err)
    assert (report_runs.root.parent / "figure.svg").stat().st_size > 1000
    site = report_runs.root.parent / "site"
    page = (site / "compare-tiny-20260101-000000--vs--tiny-20260102-000000.html").read_text()
    (command,) = [html.unescape(c) for c in re.findall(r"<code>(benchbench compare [^<]*)</code>", page)]
    assert main(shlex.split(command)[1:]) == 1, (command, capsys.readouterr().err)


def test_the_report_summary_counts_in_words(report_runs, report_models, tmp_path, monkeypatch, capsys):
    from types import SimpleNamespace

    from benchbench.cli import report_cmd

    monkeypatch.setattr(report_cmd, "catalog", lambda args: SimpleNamespace(models=report_models))
    assert main(["report", str(report_runs.base), "-o", str(tmp_path / "one")]) == 0
    assert capsys.readouterr().out.strip().endswith("index.html: 1 run, 0 comparisons (0 regressions), 6 pages")


def test_the_history_page_draws_each_cell_across_runs_and_lists_its_regressions(report_runs, report_models,
                                                                                 tmp_path):
    from benchbench.site.build import build_site

    out = tmp_path / "site"
    build_site([report_runs.root], out, models=report_models)
    html = (out / "history.html").read_text()
    # Constructed: vit-a lost 10 points of top-1 in the second run; seed 1's cell (0.82 -> 0.72) stays
    # there, seed 0's (0.80 -> 0.70) is back at 0.80 in the fourth run (one point of it): no step.
    assert _rows(html, "table-regressions") == [[
        "vit-a x fashion-mnist x scratch", "top1", "vit-a|fashion-mnist|scratch|1|[] (seed=1)", "-", "0.82", "0.72",
        "-12.2%", "threshold (5 pts, single seed)", "run 20260102-000000", "run 20260101-000000"]]
    groups = re.findall(r'<h2 id="(h-[^"]+)">(.*?)</h2>', html)
    assert [title for _, title in groups] == [f"{m} x fashion-mnist x scratch: {metric}" for m in ("bit-b", "vit-a", "vit-c")
                                              for metric in ("top1", "train_img_per_s")]
    assert html.count("<svg") == len(groups) == 6  # a figure each; the regression's row links to its figure
    assert 'href="#h-vit-a-fashion-mnist-scratch-top1"' in html
    build_site([report_runs.base], tmp_path / "one", models=report_models)  # one run: nothing has a history
    assert "No history: no cell of these 1 runs was recorded in two runs or more" in (
        tmp_path / "one" / "history.html").read_text()
