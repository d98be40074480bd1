"""User-facing errors: each says what was wrong and how to fix it; the CLI prints them without a traceback."""

from __future__ import annotations

import difflib
from typing import Iterable


class BenchError(Exception):
    """An error caused by input (a suite, an id, a file, a flag), not by a bug."""


class UnknownIdError(BenchError, KeyError):
    def __init__(self, kind: str, given: str, known: Iterable[str]):
        self.kind, self.given, self.known = kind, given, sorted(known)
        listing = f"benchbench list {kind}s" if kind in LISTED_KINDS else None
        super().__init__(unknown_message(f"{kind} id", given, self.known, how_to_list=listing))

    def __str__(self) -> str:  # KeyError would quote the message
        return self.args[0]


LISTED_KINDS = ("model", "dataset", "protocol")  # what `benchbench list` shows
SHOWN = 12  # known values listed in full up to this many; beyond, the nearest few


# Names that mean the same to a reader (other tools' spellings of our settings and keys). Only ever
# suggested: accepting `learning_rate` for `lr` would give the same cell another key.
SYNONYMS = (
    ("lr", "learning_rate", "learningrate"),
    ("weight_decay", "wd", "decay"),
    ("batch_size", "bs", "batch", "batchsize", "train_batch_size"),
    ("eval_batch_size", "eval_bs", "test_batch_size", "val_batch_size"),
    ("epochs", "epoch", "num_epochs", "n_epochs", "max_epochs"),
    ("steps", "step", "num_steps", "max_steps", "iterations", "iters", "train_steps"),
    ("seeds", "seed", "num_seeds", "random_seed"),
    ("resolution", "image_size", "img_size", "input_size", "res"),
    ("num_workers", "workers", "n_workers", "loader_workers"),
    ("warmup_fraction", "warmup", "warmup_ratio"),
    ("optimizer", "optim", "opt"),
    ("clip_grad_norm", "grad_clip", "clip_grad", "max_grad_norm", "gradient_clipping"),
    ("label_smoothing", "smoothing"),
    ("precision", "dtype", "amp", "mixed_precision"),
    ("models", "model", "archs", "arch"),
    ("datasets", "dataset", "data"),
    ("protocols", "protocol"),
    ("cuda", "gpu"),  # torch's device type, as Lightning and Keras call it ("gpu" is closest to "cpu" or "TPU")
)


def _normal(name: str) -> str:
    return name.lower().replace("-", "_")


def synonym(given: str, known: Iterable[str]) -> str | None:
    """The known value that SYNONYMS says `given` means (case and - against _ aside), else None."""
    known_by_name = {_normal(k): k for k in known}
    for group in SYNONYMS:
        if _normal(given) in group:
            found = [known_by_name[name] for name in group if name in known_by_name and name != _normal(given)]
            if found:
                return found[0]
    return None


def did_you_mean(given: str, known: Iterable[str]) -> str | None:
    """The nearest known value to `given`, or None when nothing is close."""
    nearest = nearest_matches(given, known, n=1, cutoff=0.6)
    return nearest[0] if nearest else None


def nearest_matches(given: str, known: Iterable[str], n: int, cutoff: float) -> list[str]:
    """Up to `n` known values closest to `given`, nearest first: its synonym (SYNONYMS), then the
    closest spellings (case-insensitive)."""
    known = list(known)
    lowered = {k.lower(): k for k in known}
    close = [lowered[h] for h in difflib.get_close_matches(given.lower(), list(lowered), n=n, cutoff=cutoff)]
    meant = synonym(given, known)
    return ([meant] + [c for c in close if c != meant])[:n] if meant else close


def unknown_message(what: str, given: str, known: Iterable[str], how_to_list: str | None = None) -> str:
    """"unknown <what> <given>; did you mean ...?" and the known values: all of them when there are
    few, else the nearest few and how to list them all."""
    known = sorted(known)
    msg = f"unknown {what} {given!r}"
    nearest = did_you_mean(given, known)
    if nearest is not None:
        msg += f"; did you mean {nearest!r}?"
    if not known:
        return f"{msg}\n  known: (none registered)"
    if len(known) <= SHOWN:
        return f"{msg}\n  known: {', '.join(known)}"
    close = nearest_matches(given, known, n=5, cutoff=0.3)
    listing = f"`{how_to_list}` lists all {len(known)}" if how_to_list else f"{len(known)} known in all"
    near = f"nearest: {', '.join(close)}; " if close else ""
    return f"{msg}\n  {near}{listing}"
