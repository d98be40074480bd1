"""Malformed suite files, generated: loading one is either a valid suite or a SuiteError that names
the file; never another exception (which the CLI would show as a traceback)."""

from __future__ import annotations

import json
import string
import tomllib

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchbench.errors import BenchError
from benchbench.suite import SuiteError, load_suite

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
