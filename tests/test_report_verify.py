"""The site's verification page: the reference tables of a root's `references/` folder, checked against the
runs reported as `benchbench verify` checks them, validated as HTML; a bad reference says why on the page,
and a CSV there that is no reference table is left alone."""

from __future__ import annotations

import html
import json
import re
import shlex

import pytest

from benchbench.cli import main

pytestmark = pytest.mark.usefixtures("uncounted_zoo")  # report's zoo MACs: pinned in test_report.py


@pytest.fixture
def site(report_runs, report_models, tmp_path):
    from benchbench.site.build import build_site

    folder = report_runs.root / "references"
    folder.mkdir()
    (folder / "made-up.csv").write_text(
        "model,dataset,protocol,resolution,metric,value,tolerance,source,note\n"
        "vit-a,fashion-mnist,scratch,,params,1000000,0,made up,\n"
        "BIT-B,,,,params,1000001,0,made up,a known gap\n"
        "nope,,,,params,1,0,made up,\n")
    (folder / "broken.csv").write_text("model,dataset,protocol,resolution,metric,value,tolerance,source\n"
                                       "nan,,,,params,1,0,x\n")
    (folder / "source.csv").write_text("model,infer_img_size,param_count\nresnet18,224,11.69\n")  # no table
    out = tmp_path / "site"
    build_site([report_runs.root, report_runs.nothing], out, models=report_models)
    return out


def _rows(page: str, table_id: str) -> list[list[str]]:
    body = re.search(rf'<table id="{table_id}".*?<tbody>(.*?)</tbody>', page, re.S).group(1)
    return [[html.unescape(re.sub(r"<[^>]+>", "", c)).strip()
             for c in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row, re.S)]
            for row in re.findall(r"<tr[^>]*>(.*?)</tr>", body, re.S)]


def test_each_row_as_verify_checks_it_on_a_valid_page(site, report_runs, check_site, monkeypatch, capsys):
    """One site (a build is seconds): valid HTML linked from every page, the rows of `benchbench verify`, and
    a reference that cannot be read saying why."""
    pages = check_site(site)
    assert "verify.html" in pages
    for name in ("index.html", "zoo.html", "history.html"):
        assert 'href="verify.html"' in (site / name).read_text()
    page = (site / "verify.html").read_text()
    assert "source.csv" not in page  # timm's own columns: a source, not a reference table
    rows = _rows(page, "table-reference-2")  # made-up.csv, after broken.csv
    # The command the page prints, run where the report ran, gives the same rows.
    command = html.unescape(re.search(r"<code>(benchbench verify [^<]*made-up\.csv[^<]*)</code>", page).group(1))
    argv = shlex.split(command)[1:]
    monkeypatch.chdir(report_runs.root.parent.parent if not argv[1].startswith("/") else "/")
    assert main([*argv, "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert [[r[0], r[1], r[3], r[-1]] for r in rows] == [
        [str(c["line"]), c["model"], c["metric"], c["verdict"]] for c in out["rows"]]
    # vit-a: 2 seeds in each of 3 runs that have it (tiny x2, torn), pooled into a check per run (torn: one seed
    # left); BIT-B: 2 seeds x 2 runs, likewise; nope: nothing
    assert [r[-1] for r in rows] == ["pass"] * 3 + ["fail"] * 2 + ["unmatched"]
    assert [r[6] for r in rows] == ["2 (0, 1)", "2 (0, 1)", "1 (0)", "2 (0, 1)", "2 (0, 1)", "-"]  # the Seeds column
    assert len(re.findall(r'<tr class="flagged">', page)) == 2  # the failing rows
    assert "no cell of model &#39;nope&#39; in the runs; nearest:" in page
    assert "line 3 (BIT-B params, fail): a known gap" in page
    assert "3 pass, 2 fail, 0 inconclusive, 1 unmatched" in page
    section = page.split('id="reference-1"', 1)[1].split("<h2", 1)[0]
    assert "broken.csv" in section and "could not be read or checked" in section
    assert ":2: empty model (nan); write a benchbench id" in section
    assert "not read" in page.split("<h2", 1)[0]  # in the list at the top


def test_without_references_the_page_says_how_to_add_one(report_runs, report_models, tmp_path):
    from benchbench.site.build import build_site

    build_site([report_runs.base], tmp_path / "site", models=report_models)
    page = (tmp_path / "site" / "verify.html").read_text()
    assert "No reference tables" in page and "benchbench verify REFERENCE RUN..." in page
