import textwrap

import pytest

from benchbench.plan.suite import REPO_SUITES, Cell, SuiteError, find_suite, load_suite, parse

BASE = """
    [suite]
    name = "t"
    models = ["vit-mu7", "BiT-R50x1"]
    datasets = ["fashion-mnist"]
    protocols = ["scratch"]
    seeds = [0, 1]

    [settings.scratch]
    epochs = 2
    lr = 3e-3

    [quick]
    models = ["vit-mu7"]
    [quick.settings.scratch]
    steps = 5
"""


def write(tmp_path, body, name="s.toml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def test_expands_the_matrix_with_resolved_settings(tmp_path, catalog):
    suite = load_suite(str(write(tmp_path, BASE)), catalog)
    assert suite.name == "t" and not suite.quick
    assert [(c.model, c.seed) for c in suite.cells] == [
        ("vit-mu7", 0), ("vit-mu7", 1), ("bit-r50x1", 0), ("bit-r50x1", 1)]  # alias resolved
    settings = dict(suite.cells[0].settings)
    assert settings["epochs"] == 2 and settings["lr"] == 3e-3 and settings["batch_size"] == 128  # default


def test_quick_mode_overrides(tmp_path, catalog):
    suite = load_suite(str(write(tmp_path, BASE)), catalog, quick=True, seeds=[7])
    assert [(c.model, c.seed) for c in suite.cells] == [("vit-mu7", 7)]
    assert dict(suite.cells[0].settings)["steps"] == 5 and dict(suite.cells[0].settings)["epochs"] == 2


def test_cell_keys_are_stable_and_distinct(tmp_path, catalog):
    a = load_suite(str(write(tmp_path, BASE)), catalog)
    b = load_suite(str(write(tmp_path, BASE, "copy.toml")), catalog)
    assert [c.key for c in a.cells] == [c.key for c in b.cells]
    assert len({c.key for c in a.cells}) == 4
    cell = Cell("m", "d", "p", 0, (("lr", 0.1),))
    assert cell.key == Cell("m", "d", "p", 0, (("lr", 0.1),)).key != Cell("m", "d", "p", 0, (("lr", 0.2),)).key


@pytest.mark.parametrize("change,expected", [
    (("models = [\"vit-mu7\", \"BiT-R50x1\"]", "models = [\"vit-mu8\"]"),
     ["[suite].models[0]", "unknown model id 'vit-mu8'", "did you mean 'vit-mu7'?", "`benchbench list models` lists all"]),
    (("[suite]", "[suite]\nmodel = []"), ["[suite]: unknown key 'model'", "did you mean 'models'?", "allowed:"]),
    (("epochs = 2", "epoch = 2"), ["[settings.scratch]", "unknown scratch setting 'epoch'",
                                   "did you mean 'epochs'?"]),
    (("epochs = 2", "epochs = \"two\""), ["[settings.scratch].epochs: expected int, got str 'two'"]),
    (("epochs = 2", "epochs = true"), ["[settings.scratch].epochs: expected int, got bool True"]),
    (("lr = 3e-3", "lr = -1.0"), ["[settings.scratch].lr = -1.0: must be > 0"]),
    (("epochs = 2", "optimizer = \"lamb\""), ["optimizer = 'lamb': allowed: adamw, adam, sgd"]),
    (("seeds = [0, 1]", "seeds = [\"0\"]"), ["[suite].seeds[0]: expected int, got str"]),
    (("protocols = [\"scratch\"]", "protocols = []"), ["[suite].protocols: expected a non-empty list"]),
    (("[settings.scratch]", "[settings.scratchy]"), ["[settings.scratchy]", "did you mean 'scratch'?"]),
    (("[quick]", "[quick]\nepochs = 1"), ["[quick]: unknown key 'epochs'"]),
    (("[suite]", "[suite\n"), ["not valid TOML"]),
])
def test_bad_suites_give_clear_errors(tmp_path, catalog, change, expected):
    path = write(tmp_path, textwrap.dedent(BASE).replace(*change))
    with pytest.raises(SuiteError) as err:
        load_suite(str(path), catalog)
    msg = str(err.value)
    assert msg.startswith(str(path))
    for part in expected:
        assert part in msg


def test_missing_list_names_the_key(tmp_path, catalog):
    path = write(tmp_path, '[suite]\nmodels = ["vit-mu7"]\nprotocols = ["scratch"]\n')
    with pytest.raises(SuiteError, match="missing 'datasets'"):
        load_suite(str(path), catalog)


def test_unknown_suite_name_suggests_the_nearest():
    with pytest.raises(SuiteError, match="did you mean 'quickstart'"):
        find_suite("quickstrat")


def test_every_shipped_suite_validates_and_has_quick_mode_and_command(catalog):
    paths = sorted(REPO_SUITES.glob("*.toml"))
    assert paths, "suites/ is empty"
    for path in paths:
        assert "quick" in parse(path), f"{path} has no [quick] section"
        assert f"benchbench run {path.stem}" in path.read_text().splitlines()[0], f"{path}: header command"
        for quick in (False, True):
            assert load_suite(str(path), catalog, quick=quick).cells


def test_groups_add_matrices_that_inherit_and_override(tmp_path, catalog):
    path = write(tmp_path, BASE + """
    [[group]]
    models = ["vit-mu4"]
    seeds = [5]
    settings.scratch = { epochs = 9 }

    [[group]]
    models = ["vit-mu7"]
    [group.settings.scratch]
    epochs = 2
    lr = 3e-3
    """)
    suite = load_suite(str(path), catalog)
    got = [(c.model, c.seed, dict(c.settings)["epochs"]) for c in suite.cells]
    # The second group repeats the top matrix's vit-mu7 cells exactly: they appear once.
    assert got == [("vit-mu7", 0, 2), ("vit-mu7", 1, 2), ("bit-r50x1", 0, 2), ("bit-r50x1", 1, 2), ("vit-mu4", 5, 9)]
    assert dict(suite.cells[-1].settings)["lr"] == 3e-3  # inherited from [settings]
    quick = load_suite(str(path), catalog, quick=True)
    assert {(c.model, dict(c.settings)["steps"]) for c in quick.cells} == {("vit-mu7", 5)}


def test_bad_group_key_names_the_group(tmp_path, catalog):
    path = write(tmp_path, BASE + """
    [[group]]
    model = ["vit-mu4"]
    """)
    with pytest.raises(SuiteError, match=r"\[\[group\]\] #1: unknown key 'model'; did you mean 'models'"):
        load_suite(str(path), catalog)
