"""README's command synopsis, and each synopsis in docs/, names exactly the options each command's
parser has: a new option, or one renamed, fails here until the docs say it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchbench.cli import parser

REPO = Path(__file__).resolve().parent.parent
EVERYWHERE = {"-h", "--help", "--plugin", "--strict-plugins", "--threads"}  # README states these once, for all commands


def _options(p) -> list[set[str]]:
    return [set(a.option_strings) for a in p._actions if a.option_strings and not EVERYWHERE & set(a.option_strings)]


def commands() -> dict[str, list[set[str]]]:
    """{command: the option strings of each of its options (e.g. {"-o", "--output"})}; a command with
    commands of its own (`db ingest`) is named by both words."""
    sub = parser()._subparsers._group_actions[0]
    out = {}
    for name, p in sub.choices.items():
        if p._subparsers is None:
            out[name] = _options(p)
        else:
            out.update({f"{name} {n}": _options(q) for n, q in p._subparsers._group_actions[0].choices.items()})
    return out


def synopses(text: str) -> dict[str, set[str]]:
    """{command: options} of every synopsis in the text's code blocks: a line `benchbench CMD ...`
    with an option in brackets, and the indented lines that continue it."""
    out: dict[str, set[str]] = {}
    nested = {name for name in commands() if " " in name}
    for block in re.findall(r"```\n(.*?)```", text, re.S):
        current = None
        for line in block.splitlines():
            m = re.match(r"benchbench (\w+)(?: (\w+))? ", line)
            if m and "[-" in line:
                current = f"{m.group(1)} {m.group(2)}" if f"{m.group(1)} {m.group(2)}" in nested else m.group(1)
            elif not line.startswith(" "):
                current = None
            if current:
                out.setdefault(current, set()).update(re.findall(r"(?<=[\s\[(|])--?[a-z][a-z0-9-]*", line))
    return out


def check(where: str, name: str, documented: set[str], real: list[set[str]]) -> None:
    missing = [sorted(o)[-1] for o in real if not o & documented]
    unknown = sorted(documented - set().union(*real))
    assert not missing and not unknown, f"{where}: benchbench {name}: missing {missing}, no such option {unknown}"


def test_readme_synopsis_names_every_option_of_every_command():
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Command line", 1)[1].split("\n## ", 1)[0]
    documented, real = synopses(section), commands()
    assert set(documented) == set(real)
    for name, options in real.items():
        check("README.md", name, documented[name], options)


@pytest.mark.parametrize("doc", sorted((REPO / "docs").glob("*.md")), ids=lambda p: p.name)
def test_docs_synopses_match_the_commands(doc):
    real = commands()
    for name, options in synopses(doc.read_text()).items():
        assert name in real, f"{doc.name}: benchbench {name} is no command"
        check(doc.name, name, options, real[name])
