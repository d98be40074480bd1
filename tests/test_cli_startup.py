"""A fast command line: building the parser (so `--help`) imports none of the heavy libraries, and
`list` answers from its cache without importing torch while the plugin code is unchanged.

Each check runs in a fresh interpreter and reads its `sys.modules`: a top-level `import torch` (or
pandas, matplotlib, ...) added to any command module makes the first test fail.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

HEAVY = ("torch", "torchvision", "pandas", "matplotlib", "tabulate", "fvcore", "numpy", "jinja2", "submitit",
         "ray", "scipy", "sklearn", "timm", "safetensors", "transformers")

# Runs each argv (a JSON list of argv lists on stdin) through main() in one interpreter, then
# reports the exit codes, their stdout and which heavy modules got imported.
PROBE = textwrap.dedent("""
    import contextlib, io, json, sys
    from benchbench.cli import main
    request = json.loads(sys.stdin.read())
    codes, outs = [], []
    for argv in request["argvs"]:
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            try:
                codes.append(main(argv))
            except SystemExit as exc:  # --help exits through argparse
                codes.append(exc.code)
        outs.append(out.getvalue())
    print(json.dumps({"codes": codes, "outs": outs, "loaded": [m for m in request["heavy"] if m in sys.modules]}))
""")


def probe(env, *argvs: list[str]) -> dict:
    proc = subprocess.run([sys.executable, "-c", PROBE], input=json.dumps({"argvs": argvs, "heavy": HEAVY}),
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture
def env(tmp_path):
    return {**os.environ, "BENCHBENCH_LOAD_ENTRY_POINTS": "0", "BENCHBENCH_CACHE": str(tmp_path / "cache")}


def test_help_of_every_command_imports_no_heavy_library(env):
    from benchbench.cli import COMMANDS, parser

    names = list(parser()._subparsers._group_actions[0].choices)
    assert len(names) == len(COMMANDS) >= 10
    argvs = [["--help"], *([name, "--help"] for name in names)]
    result = probe(env, *argvs)
    assert result["codes"] == [0] * len(argvs)
    assert all(out.startswith("usage: benchbench") for out in result["outs"])
    assert result["loaded"] == [], f"benchbench --help imported {result['loaded']}"


def test_list_is_cached_until_a_plugin_file_changes(env, tmp_path, monkeypatch, capsys):
    from benchbench.cli import main

    monkeypatch.setenv("BENCHBENCH_CACHE", env["BENCHBENCH_CACHE"])
    plugin = tmp_path / "my_protocols.py"
    plugin.write_text(textwrap.dedent("""
        from benchbench import hookimpl
        from benchbench.specs import ProtocolSpec

        @hookimpl
        def register_protocols(register):
            register(ProtocolSpec(id="mine", name="Mine v1", run=lambda ctx: {}))
    """))
    argv = ["list", "protocols", "--json", "--plugin", str(plugin)]
    assert main(argv) == 0  # a miss (this process has torch already): loads the plugins, stores the rows
    first = capsys.readouterr().out
    again = probe(env, argv)  # a fresh interpreter: a hit, nothing heavy imported
    assert again["codes"] == [0] and again["loaded"] == [] and again["outs"] == [first]
    rows = {r["id"]: r for r in json.loads(first)}
    assert rows["mine"]["name"] == "Mine v1" and rows["scratch"]["plugin"] == "benchbench_plugins.protocols.scratch"

    plugin.write_text(plugin.read_text().replace("Mine v1", "Mine v2 (edited)"))
    assert main(argv) == 0  # the fingerprint changed: a miss, the plugin loads again
    assert {r["id"]: r for r in json.loads(capsys.readouterr().out)}["mine"]["name"] == "Mine v2 (edited)"


def test_a_failing_plugin_is_never_cached(tmp_path, capsys):
    from benchbench.cli import main

    bad = tmp_path / "bad.py"
    bad.write_text("raise ImportError('needs a GPU library')\n")
    for _ in range(2):
        assert main(["list", "protocols", "--plugin", str(bad)]) == 0
        assert "needs a GPU library" in capsys.readouterr().err
