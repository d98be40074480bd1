"""Hugging Face ids `hf-hub:<org>/<name>[@<revision>]`, resolved from the local Hugging Face cache only.

benchbench never downloads: a checkpoint people fetched with `huggingface-cli download` (or timm,
or transformers) on a machine with internet is read from the cache those tools write, in their
layout: `<cache>/models--<org>--<name>/refs/<revision>` holds a commit hash, and
`snapshots/<commit>/` the repository's files at that commit (links into `blobs/`). The cache folder
is found as huggingface_hub finds it: HF_HUB_CACHE, else HUGGINGFACE_HUB_CACHE, else HF_HOME/hub,
else $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from benchbench.errors import BenchError

PREFIX = "hf-hub:"
DEFAULT_REVISION = "main"
# The weights a snapshot may hold, in the order they are preferred.
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
SHARDED_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
_COMMIT = re.compile(r"[0-9a-f]{40}")
_REPO = re.compile(r"(?:[A-Za-z0-9][A-Za-z0-9._-]*/)?[A-Za-z0-9][A-Za-z0-9._-]*")
_REVISION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]*")  # a branch, tag or commit; never a path out of the cache


@dataclass(frozen=True)
class HubFile:
    """What an `hf-hub:` id resolved to in the cache."""

    repo_id: str  # "org/name"
    revision: str  # as asked ("main" by default)
    commit: str  # the snapshot's commit hash
    snapshot: Path  # <cache>/models--org--name/snapshots/<commit>
    weights: Path  # the weights file in it


def is_hub_id(source: str) -> bool:
    return source.startswith(PREFIX)


def parse_hub_id(source: str) -> tuple[str, str]:
    """"hf-hub:org/name@rev" -> ("org/name", "rev"); the revision defaults to "main"."""
    rest = source[len(PREFIX):].strip()
    repo, sep, revision = rest.partition("@")
    revision = revision.strip() if sep else DEFAULT_REVISION
    if not (_REPO.fullmatch(repo) and _REVISION.fullmatch(revision)) or "--" in repo or ".." in repo + revision:
        raise BenchError(f"{source!r}: not a Hugging Face id; expected hf-hub:<org>/<name>[@<revision>], "
                         "e.g. hf-hub:google/vit-base-patch16-224")
    return repo, revision


def cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """The Hugging Face hub cache folder, found as huggingface_hub finds it."""
    env = os.environ if env is None else env
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if env.get(var):
            return Path(os.path.expandvars(env[var])).expanduser()
    if env.get("HF_HOME"):
        return Path(os.path.expandvars(env["HF_HOME"])).expanduser() / "hub"
    xdg = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".cache")
    return Path(xdg).expanduser() / "huggingface" / "hub"


def resolve(source: str, env: Mapping[str, str] | None = None) -> HubFile:
    """The cached snapshot and weights file of an `hf-hub:` id; BenchError naming every folder looked in,
    and how to fill the cache, when the id or revision is not there."""
    repo, revision = parse_hub_id(source)
    cache = cache_dir(env)
    folder = cache / ("models--" + repo.replace("/", "--"))
    looked = [f"{cache} (the cache)", f"{folder}"]
    if not folder.is_dir():
        raise _missing(source, repo, revision, looked, "no such folder", cache)
    ref = folder / "refs" / revision
    looked.append(str(ref))
    if ref.is_file():
        commit = ref.read_text(encoding="utf-8").strip()
        if not _COMMIT.fullmatch(commit):
            raise BenchError(f"{source}: {ref} should hold a 40-digit commit hash, not {commit[:60]!r}")
    elif _COMMIT.fullmatch(revision):
        commit = revision
    else:
        refs = sorted(p.name for p in (folder / "refs").glob("*") if p.is_file())
        have = f"revisions in the cache: {', '.join(refs)}" if refs else "the cache holds no revision of it"
        raise _missing(source, repo, revision, looked, f"no revision {revision!r} ({have})", cache)
    snapshot = folder / "snapshots" / commit
    looked.append(str(snapshot))
    if not snapshot.is_dir():
        raise _missing(source, repo, revision, looked, f"revision {revision!r} is commit {commit}, whose snapshot "
                       "is not in the cache", cache)
    for name in WEIGHT_FILES:
        if (snapshot / name).is_file():
            return HubFile(repo, revision, commit, snapshot, snapshot / name)
    sharded = [n for n in SHARDED_INDEXES if (snapshot / n).is_file()]
    if sharded:
        raise BenchError(f"{source}: {snapshot} holds a sharded checkpoint ({sharded[0]}); benchbench reads "
                         f"single-file checkpoints ({', '.join(WEIGHT_FILES)})")
    present = sorted(p.name for p in snapshot.iterdir())
    raise _missing(source, repo, revision, looked, f"the snapshot has no weights file ({' or '.join(WEIGHT_FILES)}; "
                   f"it holds: {', '.join(present) or 'nothing'}): an incomplete download", cache)


def _missing(source: str, repo: str, revision: str, looked: list[str], why: str, cache: Path) -> BenchError:
    rev = "" if revision == DEFAULT_REVISION else f" --revision {revision}"
    return BenchError(
        f"{source}: not in the local Hugging Face cache: {why}. Looked in:\n"
        + "".join(f"  {p}\n" for p in looked)
        + "benchbench never downloads. On a machine with internet, run\n"
        f"  huggingface-cli download {repo}{rev}\n"
        f"then copy its cache folder (~/.cache/huggingface/hub/models--{repo.replace('/', '--')}) into {cache} "
        "here (or point HF_HUB_CACHE or HF_HOME at a copy of that machine's cache)")
