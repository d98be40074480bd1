"""What results/ publishes still holds: every published table renders unchanged from its records, and
every published model's parameter count and MACs are what the models count today."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from benchbench.store import results
from benchbench.meters.flops import build_for_counting, count_macs, meta_macs
from benchbench.meters.params import count_params, params_at_default
from benchbench.specs import input_shape
from benchbench.store.rundir import read_records
from benchbench.report.tables import build_table, render

RESULTS = Path(__file__).resolve().parent.parent / "results"
RUNS = sorted(p.parent for p in RESULTS.glob("*/*/records.jsonl"))
# Suites of the paper's models at 224 px (JFT-300M's head): counted on the meta device alone below.
PAPER_SCALE = ("paper-compute", "vit-table6")


def test_every_published_run_is_checked():
    assert {p.parent.name for p in RUNS} >= {"quickstart", "paper-compute", "data-scaling", "protocols"}


@pytest.mark.parametrize("run_dir", RUNS, ids=[f"{p.parent.name}/{p.name}" for p in RUNS])
def test_published_table_renders_unchanged(run_dir):
    layout = json.loads((run_dir / "env.json").read_text()).get("table", "models")
    # force_flops: a published table shows a count that is not verified, marked † with its status (as
    # `table --force-flops` prints it; timm-compute's sequencer2d_s, whose LSTMs fvcore cannot see)
    assert render(build_table(results.load(run_dir), layout, force_flops=True)) == (run_dir / "table.md").read_text()


def _published_shapes(catalog, runs):
    """{(model, shape): (params, macs)} recorded by the ok records of `runs`."""
    out = {}
    for run_dir in runs:
        for r in read_records(run_dir).records:
            if r.ok:
                shape = input_shape(r.resolution, catalog.models.get(r.model), catalog.datasets.get(r.dataset))
                key = (r.model, tuple(sorted(shape.items())))
                assert out.setdefault(key, (r.metrics["params"], r.metrics["macs"])) == (
                    r.metrics["params"], r.metrics["macs"]), key
    return out


def test_small_models_params_and_macs_are_the_published_ones(catalog):
    """The runs of 28 px models: params and both MAC counts exactly as recorded. (timm-compute's 80 timm
    models at 224 px are tests/test_timm_zoo.py's, slow: counted there against fvcore and timm's CSV;
    the paper's models at 224 px are the next test's.)"""
    small = [p for p in RUNS if p.parent.name not in (*PAPER_SCALE, "timm-compute")]
    shapes = _published_shapes(catalog, small)
    assert len(shapes) >= 3
    for (model, shape), (params, macs) in shapes.items():
        spec = catalog.models.get(model)
        real, meta = build_for_counting(spec, **dict(shape))
        count = count_macs(real, dict(shape)["image_size"], dict(shape)["in_chans"], meta_model=meta)
        assert (count_params(real), count.macs, count.status) == (params, macs, "ok"), model


@pytest.mark.expected(seconds=8)  # default step, 2 cores: started first, so that none runs alone at its end
def test_paper_models_params_and_macs_are_the_published_ones(catalog):
    """paper-compute's and Table 6's ViT, BiT and hybrid models at 224 px: params and MACs exactly, the
    MACs by the second counter on the meta device (free; fvcore's trace of these takes minutes, and the
    two counters' agreement on every model is tests/test_flops.py's)."""
    shapes = _published_shapes(catalog, [p for p in RUNS if p.parent.name in PAPER_SCALE])
    assert len(shapes) == 15
    for (model, shape), (params, macs) in shapes.items():
        spec = catalog.models.get(model)
        assert (count_params(spec.build_on_meta(**dict(shape))), meta_macs(spec, **dict(shape))) == (params, macs), model


@pytest.mark.slow
def test_model_zoo_params_are_the_published_ones(catalog):
    text = (RESULTS / "model-zoo.md").read_text()
    rows = {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\S+)\s+.*?\s(\d+)\s+\d+\s+\S+$", text, re.M)}
    assert len(rows) == len([s for s in catalog.models if s.bind is None])  # a parametric family has no row
    wrong = {i: (n, params_at_default(catalog.models.get(i))) for i, n in rows.items()
             if params_at_default(catalog.models.get(i)) != n}
    assert wrong == {}
