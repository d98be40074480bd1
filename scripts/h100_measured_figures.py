"""The table of results/projection/h100-measured-figures.md: the H100 `profile` inference lines of results/h100
projected onto the RTX 4090, the H100 known by its datasheet figures and described by its measured ones
(results/projection/h100-measured-figures.toml), against timm's RTX 4090 inference tables.
Run from the repository root: python scripts/h100_measured_figures.py"""

import contextlib
import csv
import io
import json

from benchbench.cli import main

PROJECT = ["project", "results/projection/h100-profile.jsonl", "--to", "rtx-4090", "--json"]
DESCRIBED = {"datasheet": [], "measured": ["--devices", "results/projection/h100-measured-figures.toml"]}
TIMM = {"vit-b16": "vit_base_patch16_224", "bit-r50x1": "resnetv2_50x1_bit"}
TABLES = ("results/references/timm-benchmarks/benchmark-infer-amp-nchw-pt240-cu124-rtx4090.csv",
          "results/references/timm-benchmarks/benchmark-infer-amp-nchw-pt291-cu128-4090.csv")


def inference_rows(extra: list[str]) -> dict[str, dict]:
    """`benchbench project` of the H100 lines (run in this process), its inference rows by model."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        if main([*PROJECT, *extra]) != 0:
            raise SystemExit(f"benchbench {' '.join(PROJECT + extra)} failed")
    return {r["model"]: r for r in json.loads(out.getvalue())["rows"] if r["protocol"].endswith("infer")}


def measured(path: str) -> dict[str, float]:
    """A timm table's inference img/s at 224 px, by model."""
    with open(path, newline="") as f:
        return {r["model"]: float(r["infer_samples_per_sec"]) for r in csv.DictReader(f) if r["infer_img_size"] == "224"}


def main_() -> None:
    got = {kind: inference_rows(extra) for kind, extra in DESCRIBED.items()}
    tables = [measured(path) for path in TABLES]
    print("| model | H100 described by | projected RTX 4090 inference img/s | 80 % interval | vs timm pt240 | vs timm pt291 |")
    print("|---|---|---|---|---|---|")
    for model, name in TIMM.items():
        for kind in DESCRIBED:
            row = got[kind][model]
            value, (low, high) = row["projected_infer_img_per_s"], row["infer_interval_80"]
            errors = " | ".join(f"{100 * (value / t[name] - 1):+.1f} % ({t[name]:,.0f})" for t in tables)
            print(f"| {model} | {kind} figures | {value:,.0f} | [{low:,.0f}, {high:,.0f}] | {errors} |")


if __name__ == "__main__":
    main_()
