"""Malformed suite files, generated, and values at the extremes: loading one is either a valid suite or a
SuiteError that names the file; never another exception (which the CLI would show as a traceback).
Names that would leave the results root, numbers no run can use, seeds beyond the generators' range and
pathological TOML are refused."""

from __future__ import annotations

import json
import string
import tomllib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchbench.errors import BenchError
from benchbench.plan.suite import SuiteError, load_suite

KEYS = ["suite", "settings", "sweep", "group", "override", "quick", "name", "description", "table", "models",
        "datasets", "protocols", "seeds", "scratch", "measure", "epochs", "steps", "lr", "resolution",
        "train_subset", "batch_size", "modles", "setings"]
IDS = ["vit-mu7", "bit-r20x1-small", "vit-b16", "fashion-mnist", "scratch", "measure", "ViT-B/16", "nope", ""]

scalars = st.one_of(st.integers(-5, 10**6), st.floats(allow_nan=True, allow_infinity=True), st.booleans(),
                    st.sampled_from(IDS), st.text(st.characters(blacklist_categories=("Cs",)), max_size=5))
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(KEYS), inner, max_size=4)),
    max_leaves=12,
)
documents = st.dictionaries(st.sampled_from(KEYS), values, max_size=6)
# Close to valid: the right sections, random contents.
near_valid = st.fixed_dictionaries(
    {"suite": st.fixed_dictionaries({"models": st.lists(st.sampled_from(["vit-mu7", "bit-r20x1-small", "vit-b16"]),
                                                         min_size=1, max_size=2),
                                     "datasets": st.sampled_from([["fashion-mnist"], ["fashion-mnist"], [], [1]]),
                                     "protocols": st.lists(st.sampled_from(["scratch", "measure", "nope"]),
                                                           min_size=1, max_size=2)})},
    optional={"settings": st.dictionaries(st.sampled_from(["scratch", "measure", "nope"]),
                                          st.dictionaries(st.sampled_from(KEYS), scalars, max_size=3), max_size=2),
              "sweep": st.dictionaries(st.sampled_from(["scratch", "measure"]),
                                       st.dictionaries(st.sampled_from(KEYS), values, max_size=2), max_size=2),
              "group": st.lists(st.dictionaries(st.sampled_from(KEYS), values, max_size=3), max_size=2),
              "override": st.one_of(values, st.lists(st.dictionaries(st.sampled_from(KEYS), values, max_size=3),
                                                     max_size=2)),
              "quick": st.dictionaries(st.sampled_from(KEYS), values, max_size=3)},
)


def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return {float("inf"): "inf", float("-inf"): "-inf"}.get(v, "nan" if v != v else repr(v))
    if isinstance(v, (int, str)):
        return repr(v) if isinstance(v, int) else json.dumps(v, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return "{" + ", ".join(f'"{k}" = {toml_value(x)}' for k, x in v.items()) + "}"


def toml_document(doc: dict) -> str:
    return "\n".join(f'"{k}" = {toml_value(v)}' for k, v in doc.items()) + "\n"


def check(tmp_path, text: str, catalog) -> None:
    path = tmp_path / "fuzz.toml"
    path.write_text(text)
    try:
        load_suite(str(path), catalog)
        load_suite(str(path), catalog, quick=True)
    except SuiteError as exc:
        assert str(path) in str(exc)
    except BenchError as exc:  # pragma: no cover - the message must still say where
        raise AssertionError(f"a BenchError that is not a SuiteError: {exc}") from exc


FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@FUZZ
@given(documents)
def test_random_documents_give_a_clear_error(tmp_path, catalog, doc):
    check(tmp_path, toml_document(doc), catalog)


@FUZZ
@given(near_valid)
def test_nearly_valid_documents_give_a_clear_error_or_a_suite(tmp_path, catalog, doc):
    text = toml_document(doc)
    tomllib.loads(text)  # the generator writes valid TOML; the content is what is malformed
    check(tmp_path, text, catalog)


@FUZZ
@given(st.text(alphabet=string.printable, max_size=80))
def test_random_text_gives_a_clear_error(tmp_path, catalog, text):
    check(tmp_path, text, catalog)


# --- values at the extremes --------------------------------------------------------------------------------

BASE = """
[suite]
{name}
models = ["vit-mu7"]
datasets = ["fashion-mnist"]
protocols = ["scratch", "measure"]
seeds = {seeds}
[settings.scratch]
{scratch}
[settings.measure]
{measure}
"""


def _suite(tmp_path, name="", seeds="[0]", scratch="", measure="") -> str:
    path = tmp_path / "extreme.toml"
    path.write_text(BASE.format(name=name, seeds=seeds, scratch=scratch, measure=measure))
    return str(path)


def _refused(tmp_path, catalog, *, says: str, **parts) -> str:
    path = _suite(tmp_path, **parts)
    try:
        load_suite(path, catalog)
    except SuiteError as exc:
        message = str(exc)
        assert path in message and says in message, message
        assert "\n" not in message.split("  allowed")[0].strip(), message
        return message
    raise AssertionError(f"accepted: {parts}")


NAMES = ['"."', '".."', '"../escape"', '"a/b"', r'"a\\b"', r'"tab\there"', r'"new\nline"', r'"nul\u0000"',
         r'"bidi\u202eexe.toml"', '"' + "x" * 300 + '"', '" "', '""', '".hidden"', '"-rf"']


@pytest.mark.parametrize("name", NAMES)
def test_suite_names_that_are_not_a_plain_folder_name_are_refused(tmp_path, catalog, name):
    _refused(tmp_path, catalog, name=f"name = {name}", says="[suite].name")


@FUZZ
@given(st.text(st.characters(blacklist_categories=("Cs",)), max_size=300))
def test_any_accepted_suite_name_is_one_folder_inside_the_results_root(tmp_path, catalog, name):
    path = tmp_path / "n.toml"
    path.write_text(f"[suite]\nname = {json.dumps(name, ensure_ascii=False)}\nmodels = ['vit-mu7']\ndatasets = ['fashion-mnist']\n"
                    "protocols = ['measure']\n".replace("\x7f", "\\u007f"))
    try:
        suite = load_suite(str(path), catalog)
    except SuiteError as exc:
        assert "[suite].name" in str(exc)
        return
    root = (tmp_path / "root").resolve()
    target = (root / suite.name).resolve()
    assert target.parent == root and target.name == suite.name
    assert len(suite.name.encode()) <= 200 and suite.name.isprintable()


@pytest.mark.parametrize("part,says", [
    ({"scratch": "steps = 1_000_000_000_000_000_000"}, "steps"),
    ({"scratch": "epochs = 9223372036854775807"}, "epochs"),
    ({"scratch": "batch_size = 4294967296"}, "batch_size"),
    ({"scratch": "train_subset = 99999999999999999999999"}, "train_subset"),
    ({"scratch": "lr = inf"}, "lr"),
    ({"scratch": "lr = nan"}, "lr"),
    ({"scratch": "weight_decay = -inf"}, "weight_decay"),
    ({"scratch": "lr = 1" + "0" * 400}, "lr"),
    ({"measure": "epochs = inf"}, "epochs"),
    ({"measure": "epochs = nan"}, "epochs"),
    ({"measure": "images = 1_000_000_000_000_000_000"}, "images"),
    ({"seeds": "[-1]"}, "seeds"),
    ({"seeds": "[4294967296]"}, "seeds"),
    ({"seeds": "[18446744073709551615]"}, "seeds"),
    ({"seeds": "[" + "9" * 5000 + "]"}, "5000 digits"),  # too long for tomllib: not valid TOML
])
def test_numbers_beyond_what_a_run_can_use_are_refused(tmp_path, catalog, part, says):
    _refused(tmp_path, catalog, says=says, **part)


def test_the_largest_allowed_values_are_accepted(tmp_path, catalog):
    suite = load_suite(_suite(tmp_path, seeds="[0, 4294967295]", scratch="steps = 2147483647\nlr = 1e30"), catalog)
    assert {c.seed for c in suite.cells} == {0, 4294967295}


def test_a_sweep_of_more_cells_than_a_run_can_hold_is_refused_without_expanding_it(tmp_path, catalog):
    values = "[" + ", ".join(str(i) for i in range(1, 101)) + "]"
    path = tmp_path / "big.toml"
    path.write_text(BASE.format(name="", seeds="[0]", scratch="", measure="") + "[sweep.scratch]\n"
                    + "".join(f"{k} = {values}\n" for k in ("steps", "batch_size", "train_subset", "test_subset")))
    with pytest.raises(SuiteError, match=r"100,000,001 cells"):
        load_suite(str(path), catalog)


@pytest.mark.parametrize("text,says", [
    ("a = " + "[" * 5000 + "]" * 5000, "nested"),
    ("x = {" * 3000 + "}" * 3000, "not valid TOML"),
    (b"[suite]\nname = \"caf\xe9\"\n", "UTF-8"),
    (b"\xff\xfe[\x00s\x00u\x00", "UTF-8"),
    ("# " + "x" * (2 * 1024 * 1024) + "\n", "larger than"),
])
def test_pathological_toml_is_a_clear_error(tmp_path, catalog, text, says):
    path = tmp_path / "bad.toml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(SuiteError) as exc:
        load_suite(str(path), catalog)
    assert str(path) in str(exc.value) and says in str(exc.value)


def test_cli_refuses_a_seed_beyond_the_range_and_a_name_leaving_the_root(run_suite, capsys):
    run_suite.write('[suite]\nname = ".."\nmodels = ["vit-mu7"]\ndatasets = ["fashion-mnist"]\nprotocols = ["measure"]\n')
    assert run_suite.run() == 2
    assert "[suite].name" in capsys.readouterr().err
    run_suite.write('[suite]\nmodels = ["vit-mu7"]\ndatasets = ["fashion-mnist"]\nprotocols = ["measure"]\n')
    assert run_suite.run("--seed", str(2 ** 64)) == 2
    err = capsys.readouterr().err
    assert "--seed" in err and "4294967295" in err and "Traceback" not in err
    assert not run_suite.results.exists() and sorted(p.name for p in run_suite.dir.iterdir()) == ["data", "suite.toml"]
