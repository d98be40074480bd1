"""Contenders: a model with its weights, named by the suite's [contenders] or by default, told apart in
comparisons and tables; the name is no part of a cell's key. End to end: two checkpoints of one
model evaluated in one suite, compared image by image (exact McNemar pinned to scipy)."""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest

from benchbench.cli import main
from benchbench.store.contender import Entry, check_name, pick
from benchbench.errors import BenchError
from benchbench.store.predictions import load as load_predictions
from benchbench.plan.suite import load_suite


def _suite(tmp_path, body: str) -> str:
    path = tmp_path / "s.toml"
    path.write_text(textwrap.dedent(body))
    return str(path)


EVAL = """
    [suite]
    name = "two"
    models = ["vit-mu7"]
    datasets = ["fashion-mnist"]
    protocols = ["evaluate"]
"""


def test_default_names_and_the_suite_s_own(tmp_path, catalog):
    suite = load_suite(_suite(tmp_path, EVAL + """
        [sweep.evaluate]
        init = ["w/a.safetensors", "w/b.safetensors"]
    """), catalog)
    assert sorted(c.contender for c in suite.cells) == ["vit-mu7@a", "vit-mu7@b"]
    named = load_suite(_suite(tmp_path, EVAL + """
        [sweep.evaluate]
        init = ["w/a.safetensors", "w/b.safetensors"]
        [contenders]
        baseline = { model = "vit-mu7", init = "w/a.safetensors" }
        "in21k.ft" = { init = "w/b.safetensors" }
    """), catalog)
    assert sorted(c.contender for c in named.cells) == ["baseline", "in21k.ft"]
    assert {c.key for c in named.cells} == {c.key for c in suite.cells}  # a name is no part of a cell


@pytest.mark.parametrize("extra, message", [
    ('[contenders]\n"a b" = { init = "w/a.safetensors" }', "contender name 'a b': use 100 or fewer letters"),
    ('[contenders]\nx = { init = "w/c.safetensors" }', r"\[contenders\].x: names no cell of the suite: no cell of "
                                                        r"any model has init 'w/c.safetensors'"),
    ('[contenders]\nx = { model = "vit-mu7", weights = "w/a.safetensors" }', "unknown key 'weights'"),
    ('[contenders]\nx = { model = "vit-mu8", init = "w/a.safetensors" }', r"\[contenders\].x.model.*vit-mu7"),
    ('[contenders]\nx = { init = "w/a.safetensors" }', r"names 2 contenders \(vit-mu7, bit-r20x1-small load"),
    ('[contenders]\nx = { model = "vit-mu7", init = "w/a.safetensors" }\ny = { model = "vit-mu7", init = "w/a.safetensors" }',
     "is named 'x' already"),
    ('[contenders]\nbit-r20x1-small = { model = "vit-mu7", init = "w/a.safetensors" }', "is the id of another model of the suite"),
    # issue 44, item 14: a model of the catalog that the suite does not run, which `verify` would match
    ('[contenders]\nvit-b16 = { model = "vit-mu7", init = "w/a.safetensors" }',
     r"s\.toml: \[contenders\]\.vit-b16: 'vit-b16' names another model of the catalog \(vit-b16\), not this "
     r"contender's vit-mu7 \(init 'w/a\.safetensors'\): `verify` and --models would take it for vit-b16; choose "
     r"another name, e\.g\. 'vit-mu7@a'$"),
    ('[contenders]\n"ViT-B/16" = { model = "vit-mu7", init = "w/a.safetensors" }', r"\[contenders\]\.ViT-B/16: "
     r"'ViT-B/16' names another model of the catalog \(vit-b16\)"),  # its alias and display name
    ('[contenders]\n"timm/resnet50" = { model = "vit-mu7", init = "w/a.safetensors" }',
     r"names another model of the catalog \(timm/resnet50\)"),  # a parametric family's model, never bound
])
def test_bad_names_are_refused_with_their_key_path(tmp_path, catalog, extra, message):
    body = EVAL.replace('["vit-mu7"]', '["vit-mu7", "bit-r20x1-small"]') + """
        [sweep.evaluate]
        init = ["w/a.safetensors", "w/b.safetensors"]
    """ + extra
    with pytest.raises(BenchError, match=message):
        load_suite(_suite(tmp_path, body), catalog)


def test_a_contender_may_bear_its_own_model_s_names(tmp_path, catalog):
    """The check is against other models: a checkpoint of vit-mu7 may be called by vit-mu7's display name."""
    suite = load_suite(_suite(tmp_path, EVAL + """
        [sweep.evaluate]
        init = ["w/a.safetensors", "w/b.safetensors"]
        [contenders]
        "ViT-Mu/7" = { model = "vit-mu7", init = "w/a.safetensors" }
    """), catalog)
    assert sorted(c.contender for c in suite.cells) == ["ViT-Mu/7", "vit-mu7@b"]


def test_a_default_name_is_the_contenders_own_whatever_a_parametric_family_reads_in_it():
    """`timm/<arch>@<stem>` is a timm checkpoint's default contender name, which timm's family would also
    read as an architecture named `<arch>@<stem>`: a default name is never refused as another model's
    (CI's slow step failed on tests/test_timm_heads.py this way); a name the suite gives still is."""
    from types import SimpleNamespace

    from benchbench.plan.contenders import Given, name_cells

    cell = SimpleNamespace(model="timm/resnet10t.c3_in1k", settings={"init": "w/r.pth"},
                           but=lambda **kw: SimpleNamespace(model="timm/resnet10t.c3_in1k", **kw))
    claims = lambda name: name if name.startswith("timm/") else None  # the family's reading of any timm/ name
    (named,) = name_cells([cell], [], "suite.toml", claims)
    assert named.contender == "timm/resnet10t.c3_in1k@r"
    given = Given(name="timm/other", model=None, init="w/r.pth", where="suite.toml: [contenders].timm/other")
    with pytest.raises(BenchError, match=r"'timm/other' names another model of the catalog \(timm/other\)"):
        name_cells([cell], [given], "suite.toml", claims)


def test_two_inits_of_one_stem_must_be_named_apart(tmp_path, catalog):
    body = EVAL + """
        [sweep.evaluate]
        init = ["one/w.safetensors", "two/w.safetensors"]
    """
    with pytest.raises(BenchError, match=r"two contenders are both named 'vit-mu7@w'.*name them apart in \[contenders\]"):
        load_suite(_suite(tmp_path, body), catalog)
    suite = load_suite(_suite(tmp_path, body + '[contenders]\nsecond = { init = "two/w.safetensors" }\n'), catalog)
    assert sorted(c.contender for c in suite.cells) == ["second", "vit-mu7@w"]


def test_two_entries_of_one_model_and_init_are_one_cell_and_the_dry_run_says_so(tmp_path, catalog, capsys):
    path = _suite(tmp_path, EVAL + """
        [settings.evaluate]
        init = "w/a.safetensors"
        [[group]]
        models = ["vit-mu7"]
        settings.evaluate = { init = "w/a.safetensors" }
    """)
    suite = load_suite(path, catalog)
    assert len(suite.cells) == 1
    assert suite.notes == ("1 cell of [[group]] #1 is already [suite]'s: the same model, dataset, protocol, seed and "
                           "settings (a contender's name is no part of a cell); each runs once",)
    main(["run", path, "--dry-run", "--results", str(tmp_path / "r"), "--data-root", str(tmp_path)])
    out = capsys.readouterr().out
    assert "note: 1 cell of [[group]] #1 is already [suite]'s" in out and "| Contender" in out


def test_check_name_and_pick():
    assert check_name("vit-b16@in21k_ft/v2+x", "w") == "vit-b16@in21k_ft/v2+x"
    for bad in ("", "-x", "a b", "é", "x" * 101, 3):
        with pytest.raises(BenchError, match="contender name"):
            check_name(bad, "w")
    run = [Entry("vit@a", "vit", "a.pt"), Entry("vit@b", "vit", "b.pt"), Entry("bit", "bit", "")]
    assert pick(run, ["vit@b", "bit"], "R") == ["vit@b", "bit"]
    with pytest.raises(BenchError, match=r"R has 2 contenders of model vit \(vit@a, vit@b\): name the one you mean"):
        pick(run, ["vit", "bit"], "R")
    with pytest.raises(BenchError, match=r"R: unknown contender 'vit@c'; did you mean 'vit@b'\?\n  known: bit, vit, vit@a, vit@b"):
        pick(run, ["vit@c", "bit"], "R")
    with pytest.raises(BenchError, match=r"bit names the contender 'bit' a second time"):
        pick(run, ["bit", "bit"], "R")
    with pytest.raises(BenchError, match="name at least 2"):
        pick(run, ["bit"], "R", at_least=2)
    with pytest.raises(BenchError, match="the name 'x' names 2 contenders"):
        pick([Entry("x", "vit", "a.pt"), Entry("x", "vit", "b.pt")], ["x"], "R")


@pytest.fixture
def checkpoints(tmp_path, catalog):
    """Two random ViT-Mu/7 checkpoints (a.safetensors, b.safetensors) and a BiT one, as benchbench writes them."""
    import torch

    from benchbench.weights.checkpoints import save_checkpoint

    out = {}
    for name, model, seed in (("a", "vit-mu7", 1), ("b", "vit-mu7", 2), ("c", "bit-r20x1-small", 3)):
        torch.manual_seed(seed)
        path = tmp_path / f"{name}.safetensors"
        save_checkpoint(catalog.models.get(model).build(num_classes=10, image_size=28, in_chans=1), path,
                        num_classes=10)
        out[name] = path
    return out


def test_two_checkpoints_of_one_model_compared_end_to_end(run_suite, checkpoints, capsys):
    scipy_stats = pytest.importorskip("scipy.stats")
    a, b, c = checkpoints["a"], checkpoints["b"], checkpoints["c"]
    run_suite.write(f"""
        [suite]
        name = "two"
        models = ["vit-mu7"]
        datasets = ["fashion-mnist"]
        protocols = ["evaluate"]
        [sweep.evaluate]
        init = ["{a}", "{b}"]
        [[group]]
        models = ["bit-r20x1-small"]
        sweep.evaluate = {{ init = ["{c}"] }}
    """)
    assert run_suite.run() == 0, capsys.readouterr().err
    records = {r.contender: r for r in run_suite.records()}
    assert set(records) == {"vit-mu7@a", "vit-mu7@b", "bit-r20x1-small@c"}
    capsys.readouterr()
    run = str(run_suite.run_dir)
    assert main(["compare", run, "--models", "vit-mu7@a", "vit-mu7@b", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["comparisons"]
    right = {}
    for name in ("vit-mu7@a", "vit-mu7@b"):
        preds = load_predictions(run_suite.run_dir, records[name].predictions, records[name].key)
        right[name] = np.asarray(preds.top5)[:, 0] == np.asarray(preds.label)
    b_only = int((right["vit-mu7@b"] & ~right["vit-mu7@a"]).sum())
    a_only = int((right["vit-mu7@a"] & ~right["vit-mu7@b"]).sum())
    assert (row["contender_a"], row["contender_b"], row["test"]) == ("vit-mu7@a", "vit-mu7@b",
                                                                     "exact McNemar (paired, two-sided)")
    if a_only + b_only:
        assert row["p_value"] == pytest.approx(scipy_stats.binomtest(b_only, a_only + b_only, 0.5).pvalue, rel=1e-9)
    assert row["diff"] == pytest.approx(records["vit-mu7@b"].metrics["top1"] - records["vit-mu7@a"].metrics["top1"])
    # a model of two contenders is not a name; a model of one is (the case: cells that differ in init)
    assert main(["compare", run, "--models", "vit-mu7", "bit-r20x1-small"]) == 2
    assert "has 2 contenders of model vit-mu7 (vit-mu7@a, vit-mu7@b)" in capsys.readouterr().err
    assert main(["compare", run, "--models", "bit-r20x1-small", "vit-mu7@a", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["comparisons"]
    assert (row["contender_a"], row["model_a"]) == ("bit-r20x1-small@c", "bit-r20x1-small")
    # run against run matches contenders by name
    assert main(["compare", run, run, "--models", "vit-mu7@b", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)["comparisons"]
    assert {r["contender"] for r in got} == {"vit-mu7@b"} and all(r["verdict"] == "same" for r in got)
    # the table: a row per contender, never one mean over the two checkpoints
    assert main(["table", run, "--layout", "models", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert sorted(r["model"] for r in rows) == ["bit-r20x1-small", "vit-mu7@a", "vit-mu7@b"]
    assert all(r["fashion-mnist:n"] == 1 for r in rows)


def test_db_query_shows_suite_run_and_contender(tmp_path, make_record, capsys):
    from dataclasses import replace

    from benchbench.store.rundir import append_record

    runs = {}
    for name, top1, day in (("a", 0.8, 1), ("b", 0.9, 2)):
        run = runs[name] = tmp_path / "results" / "two" / f"2026010{day}-000000"
        run.mkdir(parents=True)
        record = make_record("vit", "d", "evaluate", 0, top1, settings={"init": f"w/{name}.pt"})
        append_record(run, replace(record, suite="two", run_id=run.name, contender=f"vit@{name}"))
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    assert main(["db", "ingest", str(tmp_path / "results"), "--db", url]) == 0
    capsys.readouterr()
    assert main(["db", "query", "--db", url]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert [c.strip() for c in lines[0].split("|")[1:3]] == ["Run", "Contender"]
    assert [[c.strip() for c in line.split("|")[1:3]] for line in lines[2:4]] == [
        ["20260101-000000", "vit@a"], ["20260102-000000", "vit@b"]]
    assert "In every row: Suite two;" in out  # the same in every row: said once
    assert main(["db", "query", "--db", url, "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["suite"], r["run_id"], r["contender"]) for r in rows] == [("two", runs["a"].name, "vit@a"),
                                                                        ("two", runs["b"].name, "vit@b")]


def test_a_control_character_in_an_init_files_name_is_escaped_in_its_default_name(make_record):
    """Issue 44, item 14: a newline in the init file's name made a name no record may hold, and the run
    stopped at that cell on every resume."""
    import json
    from dataclasses import replace

    from benchbench.store.contender import default_name
    from benchbench.store.record import Record

    name = default_name("vit-mu7", {"init": "weights/a\nb\x1b.pt"})
    assert name == "vit-mu7@a\\x0ab\\x1b"
    record = replace(make_record("vit-mu7", top1=0.5), contender=name)
    assert Record.from_json(json.loads(json.dumps(record.to_json()))).contender == name
