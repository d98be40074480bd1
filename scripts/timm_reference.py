"""The timm reference shipped in results/references/: a slice of timm's benchmark CSV, and the reference
table `benchbench verify` reads, derived from it.

    .venv/bin/python scripts/timm_reference.py ../shared/references/timm-benchmark-infer-amp-nchw-pt291-cu128-4090.csv

writes, for every `timm/<name>` model of suites/timm-compute.toml:
- results/references/timm-benchmark-infer-4090-slice.csv: the rows of timm's CSV at 224 px, copied unchanged
  (header included), in the suite's order;
- results/references/timm-benchmark-infer-4090.csv: the reference table: per model, `params` (timm's
  param_count, millions to 0.01, as a count: tolerance half its last digit, 5,000) and `gmacs_fvcore`
  (infer_gmacs, fvcore's count to 0.01: tolerance 0.005), with the known gaps' notes below; for the
  models timm's benchmark counts after reparameterize_model, `params` and `gmacs` in the
  `reparameterized` convention (fvcore's count and the parameters of that inference form), and for
  a model it counts with another head, `num_classes` in the row's settings.
Without an argument, only the reference table is written again from the slice.
"""

from __future__ import annotations

import csv
import io
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SUITE = REPO / "suites" / "timm-compute.toml"
SLICE = REPO / "results" / "references" / "timm-benchmark-infer-4090-slice.csv"
REFERENCE = REPO / "results" / "references" / "timm-benchmark-infer-4090.csv"
RESOLUTION = 224
SOURCE = ("timm benchmark-infer-amp-nchw-pt291-cu128-4090.csv (huggingface/pytorch-image-models results/, "
          "commit aa4b5850, Apache-2.0)")
REPARAM = ("timm's benchmark counts this model after timm.utils.reparameterize_model (its branches and norms "
           "fused into single convolutions, the inference form): so the row is checked in the reparameterized "
           "convention, the cell's params_reparameterized and gmacs_reparameterized (fvcore on that form); the "
           "model as built, for training, has more of both")
# Counted by timm's benchmark on the inference form: their rows' `convention` (checked by tests/test_timm_zoo.py).
REPARAMETERIZED = ("repvgg_a2", "levit_128s", "repvit_m1", "tiny_vit_5m_224")
# Counted by timm's benchmark with another head than ImageNet's 1,000 classes: their rows' `settings`.
HEADS = {"tiny_vit_5m_224": 21_841}  # timm.create_model's default: its default tag's (in22k) classes
# Known gaps and conventions: (model, the row's metric) -> the note that explains them.
NOTES = {
    **{(m, metric): REPARAM for m in REPARAMETERIZED if m not in HEADS for metric in ("params", "gmacs")},
    **{("tiny_vit_5m_224", metric): (
        "timm's benchmark counts this model after timm.utils.reparameterize_model and with timm.create_model's "
        "default head, 21,841 classes (its default tag, in22k): the row names both (convention reparameterized, "
        "num_classes=21841: 12,077,797 parameters, 1.2661 GMACs). With ImageNet's 1,000 classes as built "
        "(5,392,764 parameters, 1.2704 GMACs in fvcore's count) its GMACs agree at 2 decimals only because the "
        "smaller head and the missing fusion offset each other") for metric in ("params", "gmacs")},
    ("sequencer2d_s", "gmacs_fvcore"): (
        "passes, but timm's figure, as fvcore, leaves out the LSTMs' work (aten::lstm, an operator fvcore "
        "cannot see): torch's FlopCounterMode counts 8.33 GMACs in all, so the cell's flops_status is "
        "'incomplete: aten::lstm' and benchbench's tables refuse its GMACs unless --force-flops"),
}
HEADER = ["model", "aliases", "dataset", "protocol", "resolution", "settings", "convention", "metric", "value",
          "tolerance", "source", "note"]


def suite_models() -> list[str]:
    """timm's names of the suite's `timm/<name>` models, in its order ([suite]'s, then each [[group]]'s)."""
    suite = tomllib.loads(SUITE.read_text())
    models = [*suite["suite"].get("models", []), *(m for group in suite.get("group", []) for m in group["models"])]
    return [m.partition("/")[2] for m in models if m.startswith("timm/")]


def slice_rows(full_csv: Path, names: list[str]) -> str:
    """The lines of timm's CSV (header first) for `names` at RESOLUTION, unchanged, in that order."""
    lines = full_csv.read_text().splitlines(keepends=True)
    header, rows = lines[0], {}
    for line in lines[1:]:
        model, size = next(csv.reader([line]))[:2]
        if int(size) == RESOLUTION:
            rows[model] = line
    missing = [n for n in names if n not in rows]
    if missing:
        raise SystemExit(f"{full_csv}: no row at {RESOLUTION} px for {', '.join(missing)}")
    return header + "".join(rows[n] for n in names)


def reference(slice_text: str) -> str:
    """The reference table of the slice: params and gmacs_fvcore rows per model."""
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(HEADER)
    for r in csv.DictReader(io.StringIO(slice_text)):
        name = r["model"]
        params = round(float(r["param_count"]) * 1e6)  # millions to 0.01: a whole number of parameters
        for metric, value, tolerance in (("params", params, "5000"), ("gmacs_fvcore", r["infer_gmacs"], "0.005")):
            # fvcore's count of the inference form is the reparameterized convention's gmacs
            convention, written = (("reparameterized", metric.replace("gmacs_fvcore", "gmacs"))
                                   if name in REPARAMETERIZED else ("", metric))
            settings = f"num_classes={HEADS[name]}" if name in HEADS else ""
            w.writerow([f"timm/{name}", "", "imagenet", "measure", r["infer_img_size"], settings, convention, written,
                        value, tolerance, SOURCE, NOTES.get((name, written), "")])
    return out.getvalue()


def main(argv: list[str]) -> int:
    if argv:
        SLICE.write_text(slice_rows(Path(argv[0]), suite_models()))
    REFERENCE.write_text(reference(SLICE.read_text()))
    print(f"{REFERENCE.relative_to(REPO)}: {len(suite_models())} models")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
