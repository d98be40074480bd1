import importlib.metadata
import textwrap
from pathlib import Path

import pluggy
import pytest

from benchbench import hookimpl
from benchbench.errors import UnknownIdError
from benchbench.plugins import (PluginError, builtin_entry_points, collect, load_catalog, load_plugins,
                                make_manager)
from benchbench.registry import DuplicateIdError
from benchbench.specs import ModelSpec

PLUGIN_FILES = sorted((Path(__file__).resolve().parent.parent / "plugins").glob("*/*.py"))


def _model(model_id: str, aliases=()) -> ModelSpec:
    return ModelSpec(id=model_id, name=model_id.upper(), family="test", build=lambda **kw: None,
                     default_resolution=28, aliases=aliases)


class InlinePlugin:
    @hookimpl
    def register_models(self, register):
        register(_model("inline-net", aliases=("Inline/Net",)))


def test_builtins_load_through_the_plugin_manager():
    pm = make_manager()
    failures = load_plugins(pm, entry_points=False)
    assert failures == []
    # The built-ins are benchbench's own entry points: pyproject.toml lists every plugin module.
    builtins = {ep.name for ep in builtin_entry_points()}
    modules = {f"benchbench_plugins.{p.parent.name}.{p.stem}" for p in PLUGIN_FILES if "@hookimpl" in p.read_text()}
    assert builtins == modules and len(builtins) == 31
    assert {name for name, _ in pm.list_name_plugin()} == builtins
    cat = collect(pm)
    assert "vit-b16" in cat.models and "bit-r50x1" in cat.models
    assert cat.datasets.get("fashion-mnist").num_classes == 10
    assert cat.protocols.get("scratch").id == "scratch"
    assert cat.models.plugin_of["vit-b16"] == "benchbench_plugins.models.vit"


def test_inline_plugin_on_a_fresh_manager():
    pm = make_manager()
    pm.register(InlinePlugin(), name="inline")
    try:
        cat = collect(pm)
        assert [s.id for s in cat.models] == ["inline-net"]
        assert cat.models.plugin_of["inline-net"] == "inline"
        assert cat.models.get("INLINE/NET").id == "inline-net"  # alias, case-insensitive
    finally:
        pm.unregister(name="inline")


def test_paper_spelling_is_an_alias(catalog):
    assert catalog.models.resolve("ViT-B/16") == "vit-b16"
    assert catalog.models.get("ViT-H/14").name == "ViT-H/14"
    assert catalog.models.resolve("ResNet152x4") == "bit-r152x4"
    assert catalog.models.resolve("BiT-L") == "bit-r152x4"


def test_unknown_id_lists_known_ids_and_nearest(catalog):
    with pytest.raises(UnknownIdError) as err:
        catalog.models.get("vit-b61")
    msg = str(err.value)
    assert "unknown model id 'vit-b61'" in msg
    assert "did you mean 'vit-b16'?" in msg
    # more than a dozen known: the nearest few, and how to list them all
    assert "nearest: vit-b16, vit-b14, vit-s16" in msg and "bit-r101x1" not in msg
    assert f"`benchbench list models` lists all {len(catalog.models.specs)}" in msg
    with pytest.raises(UnknownIdError, match="known: evaluate, fewshot, finetune, .*scratch"):
        catalog.protocols.get("scrach")  # few known: every one


def test_parametric_ids_take_their_kinds_separator():
    """A parametric model is "<id>/<arg>", a parametric dataset "<id>:<arg>" (the spec's bind_separator);
    the other separator is no parametric id, and a bound spec is remembered."""
    from dataclasses import replace

    from benchbench.errors import BenchError
    from benchbench.registry import Registry, parametric_form
    from benchbench.specs import DatasetSpec

    binds = []
    family = replace(_model("zoo", aliases=("Zoo-Alias",)),
                     bind=lambda arg: binds.append(arg) or replace(_model(f"zoo/{arg}"), name=arg))
    models = Registry("model")
    models.add(family, "p")
    models.add(_model("zoo-net"), "p")
    assert (parametric_form(family), parametric_form(models.get("zoo-net"))) == ("zoo/<arg>", None)
    assert models.resolve("ZOO/Net.Tag") == "zoo/Net.Tag" and models.get("zoo-alias/Net.Tag").name == "Net.Tag"
    assert binds == ["Net.Tag"] and models.plugin_of["zoo/Net.Tag"] == "p"  # bound once, for both spellings
    assert "zoo/x" in models and "zoo:x" not in models and "zoo-net" in models
    with pytest.raises(UnknownIdError, match="unknown model id 'zoo:x'"):
        models.get("zoo:x")
    with pytest.raises(BenchError, match="model 'zoo' takes an argument: write zoo/<arg>"):
        models.get("zoo")
    datasets = Registry("dataset")
    folder = DatasetSpec(id="folder", name="F", num_classes=0, image_size=8, in_chans=1, splits=("test",),
                         load=lambda split, options: None,
                         bind=lambda arg: DatasetSpec(id=f"folder:{arg}", name=arg, num_classes=2, image_size=8,
                                                      in_chans=1, splits=("test",), load=lambda s, o: None))
    datasets.add(folder, "p")
    assert parametric_form(folder) == "folder:<arg>" and datasets.resolve("folder:/a/B") == "folder:/a/B"
    assert "folder/a" not in datasets


def test_duplicate_id_names_both_plugins():
    class Other:
        @hookimpl
        def register_models(self, register):
            register(_model("clash-net"))

    class Another:
        @hookimpl
        def register_models(self, register):
            register(_model("other-net", aliases=("CLASH-NET",)))

    pm = make_manager()
    pm.register(Other(), name="first-plugin")
    pm.register(Another(), name="second-plugin")
    with pytest.raises(DuplicateIdError) as err:
        collect(pm)
    msg = str(err.value)
    assert "'first-plugin'" in msg and "'second-plugin'" in msg and "'CLASH-NET'" in msg


def _write(tmp_path, name, body):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


GOOD_FILE = """
    from benchbench import hookimpl
    from benchbench.specs import ModelSpec

    @hookimpl
    def register_models(register):
        register(ModelSpec(id="file-net", name="FileNet", family="test", build=lambda **kw: None,
                           default_resolution=28))
"""


def test_local_plugin_file(tmp_path):
    cat = load_catalog([_write(tmp_path, "good.py", GOOD_FILE)], entry_points=False)
    assert cat.failures == []
    assert cat.models.plugin_of["file-net"] == f"file:{tmp_path / 'good.py'}"


def test_broken_plugin_is_reported_and_skipped(tmp_path):
    broken = _write(tmp_path, "broken.py", "import not_a_module_anywhere\n")
    good = _write(tmp_path, "good.py", GOOD_FILE)
    cat = load_catalog([broken, good], entry_points=False)
    assert len(cat.failures) == 1
    failure = cat.failures[0]
    assert failure.plugin == f"file:{broken}"
    assert "ModuleNotFoundError" in failure.error and "not_a_module_anywhere" in failure.error
    assert "file-net" in cat.models and "vit-b16" in cat.models  # the rest keep working


def test_plugin_raising_in_register_is_isolated_and_not_half_registered(tmp_path):
    raising = _write(tmp_path, "raising.py", """
        from benchbench import hookimpl
        from benchbench.specs import ModelSpec


        @hookimpl
        def register_models(register):
            register(ModelSpec(id="half-net", name="Half", family="t", build=None, default_resolution=28))
            raise RuntimeError("boom")
    """)
    cat = load_catalog([raising], entry_points=False)
    assert [f.error for f in cat.failures] == ["RuntimeError: boom"]
    assert "half-net" not in cat.models
    with pytest.raises(PluginError, match="raised in register_models: RuntimeError: boom"):
        load_catalog([raising], entry_points=False, strict=True)


def test_strict_plugins_turns_a_failure_into_an_error(tmp_path):
    broken = _write(tmp_path, "broken.py", "raise ValueError('bad plugin')\n")
    with pytest.raises(PluginError, match=r"failed to load: ValueError: bad plugin"):
        load_catalog([broken], strict=True, entry_points=False)


def test_missing_plugin_file_is_reported(tmp_path):
    cat = load_catalog([tmp_path / "nope.py"], entry_points=False)
    assert "no such file" in cat.failures[0].error


def test_misspelt_hook_fails_loudly(tmp_path):
    typo = _write(tmp_path, "typo.py", """
        from benchbench import hookimpl

        @hookimpl
        def register_model(register):
            pass
    """)
    with pytest.raises(PluginError, match="register_model"):
        load_catalog([typo], entry_points=False)


def test_entry_points_load_through_the_same_path(monkeypatch, tmp_path):
    _write(tmp_path, "ep_plugin_mod.py", GOOD_FILE)
    monkeypatch.syspath_prepend(str(tmp_path))
    eps = importlib.metadata.EntryPoints([
        *importlib.metadata.entry_points(group="benchbench"),  # the built-ins
        importlib.metadata.EntryPoint(name="ep-plugin", value="ep_plugin_mod", group="benchbench"),
        importlib.metadata.EntryPoint(name="ep-broken", value="ep_missing_mod", group="benchbench"),
    ])
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: eps.select(group=group))
    monkeypatch.setenv("BENCHBENCH_LOAD_ENTRY_POINTS", "1")
    cat = load_catalog()
    assert cat.models.plugin_of["file-net"] == "ep-plugin"
    assert [f.plugin for f in cat.failures] == ["ep-broken"]
    monkeypatch.setenv("BENCHBENCH_LOAD_ENTRY_POINTS", "0")
    assert "file-net" not in load_catalog().models and "vit-b16" in load_catalog().models


def test_missing_builtins_are_a_clear_error(monkeypatch):
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: importlib.metadata.EntryPoints([]))
    with pytest.raises(PluginError, match="built-in plugins are not registered.*pip install -e"):
        load_catalog()


def test_hookspecs_are_documented():
    pm = make_manager()
    for name in ("register_models", "register_datasets", "register_protocols", "register_executors"):
        hook = getattr(pm.hook, name)
        doc = hook.spec.function.__doc__
        assert "Collect-all" in doc and ":param register:" in doc
        assert isinstance(hook, pluggy.HookCaller)
