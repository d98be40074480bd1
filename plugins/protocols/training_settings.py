"""The settings the built-in protocols share: data (resolution, workers, precision), subsets, the
optimisation settings of `fit` and how many devices run it, each declared once with
protocol-specific defaults; and the roles (`specs.Roles`) that tell the core which of them carry the
resolution, precision, world of processes and execution."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from benchbench import precision
from benchbench.execution import SETTINGS as EXECUTION_SETTINGS
from benchbench.settings import non_negative, one_of, positive, unit_interval
from benchbench.specs import Roles, Setting
from benchbench.world import SHARDINGS

# Which settings carry what the core resolves once per cell: every protocol that reads images has a
# resolution and a precision (forward passes only: no fp8); those that train, the world and execution.
DATA_ROLES = Roles(resolution="resolution", precision="precision")
FORWARD_ROLES = Roles(resolution="resolution", precision="precision", precision_mode="infer")
TRAINING_ROLES = Roles(resolution="resolution", precision="precision", devices="devices", nodes="nodes",
                       sharding="sharding", global_batch="batch_size", execution=True)


def at_least(low: int):
    def check(value) -> str | None:
        return None if value >= low else f"must be >= {low}"

    return check


def in_range(low: float, high: float):
    def check(value) -> str | None:
        return None if low <= value <= high else f"must be in [{low}, {high}]"

    return check


def subset_settings(*, train: bool = True) -> dict[str, Setting]:
    """Which examples a protocol uses: seeded subsets of the test split and (`train`) the training split."""
    out = {
        "train_subset": Setting(0, int, "train (or fit the probe) on a seeded random subset of this many images; "
                                "0 = all", non_negative),
        "train_per_class": Setting(0, int, "train (or fit the probe) on the first N images of each class after a "
                                   "seeded shuffle; 0 = all (not together with train_subset)", non_negative),
        "test_subset": Setting(0, int, "evaluate on a seeded random subset; 0 = the whole test split", non_negative),
    }
    return out if train else {"test_subset": out["test_subset"]}


def split_sizes(settings: Any, dataset_spec: Any) -> tuple[int | None, int | None]:
    """(training images, test images) a cell uses after its subset settings; None where the dataset
    does not declare a split's size."""
    n_train = dataset_spec.num_examples.get("train")
    n_test = dataset_spec.num_examples.get("test")
    if settings.get("train_per_class", 0) > 0 and n_train is not None:
        n_train = min(n_train, settings["train_per_class"] * dataset_spec.num_classes)
    elif settings.get("train_subset", 0) > 0 and n_train is not None:
        n_train = min(n_train, settings["train_subset"])
    if settings["test_subset"] > 0 and n_test is not None:
        n_test = min(n_test, settings["test_subset"])
    return n_train, n_test


def data_settings(*, trains: bool = True, **defaults: Any) -> dict[str, Setting]:
    """Settings every protocol that reads images has: resolution, loader workers, precision. A protocol
    that only runs a frozen backbone forward (`trains=False`: few-shot, linear) refuses fp8, which is
    float8 training (benchbench.precision's rule for mode "infer")."""
    mode = "train" if trains else "infer"
    out = {
        "resolution": Setting(0, int, "input resolution in px; 0 = the dataset's native size", non_negative),
        "num_workers": Setting(-1, int, "DataLoader worker processes; -1 = auto (0 for in-memory data "
                               "and on <= 2 CPUs, else min(4, CPUs / 2))", at_least(-1)),
        "precision": Setting(precision.DEFAULT, str, precision.setting_help(mode), precision.setting_check(mode)),
    }
    for key, value in defaults.items():
        out[key] = replace(out[key], default=value)
    return out


def parallel_settings() -> dict[str, Setting]:
    """How many devices train a cell, and how (plugins/protocols/distributed.py)."""
    return {
        "devices": Setting(1, int, "data-parallel processes per node (GPUs on CUDA, processes on the CPU); "
                           "batch_size stays the global batch, split across them", positive),
        "nodes": Setting(1, int, "machines (> 1: under Slurm, one launcher per node); devices in all = "
                         "devices x nodes", positive),
        "sharding": Setting("ddp", str, "ddp (replicated weights, averaged gradients) | fsdp (weights, "
                            "gradients and optimiser state sharded: torch's fully_shard)", one_of(*SHARDINGS)),
        "activation_checkpointing": Setting(False, bool, "recompute each block's activations in the backward "
                                            "pass (less memory, about a third more compute)"),
        "timeout_s": Setting(600.0, float, "a collective that waits longer (a rank hung or dead) fails the "
                             "cell", positive),
    }


def train_settings(**defaults: Any) -> dict[str, Setting]:
    """The optimisation settings of `fit`, with protocol-specific defaults."""
    out = {
        "epochs": Setting(1, int, "passes over the training split (ignored when steps > 0)", non_negative),
        "steps": Setting(0, int, "optimiser steps; 0 means use epochs", non_negative),
        "batch_size": Setting(128, int, "training batch size: the global batch, split across devices", positive),
        "optimizer": Setting("adamw", str, "adamw | adam | sgd", one_of("adamw", "adam", "sgd")),
        "lr": Setting(1e-3, float, "peak learning rate", positive),
        "weight_decay": Setting(0.05, float, "on weight matrices and kernels only", non_negative),
        "beta2": Setting(0.999, float, "Adam's second-moment decay", unit_interval),
        "momentum": Setting(0.9, float, "SGD momentum", unit_interval),
        "schedule": Setting("cosine", str, "decay after warm-up: cosine | linear", one_of("cosine", "linear")),
        "warmup_fraction": Setting(0.05, float, "fraction of steps with linear warm-up", unit_interval),
        "clip_grad_norm": Setting(1.0, float, "global gradient-norm clip; 0 disables", non_negative),
        "label_smoothing": Setting(0.0, float, "cross-entropy label smoothing", unit_interval),
        "augment": Setting(False, bool, "random crop + flip on training images (flip only for in-memory data)"),
        **subset_settings(),
        "eval_batch_size": Setting(512, int, "evaluation batch size", positive),
        **parallel_settings(),
        **EXECUTION_SETTINGS,
    }
    for key, value in defaults.items():
        out[key] = replace(out[key], default=value)
    return out
