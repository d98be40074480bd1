"""Per-image predictions: what evaluation, linear and few-shot keep, the file (atomic, sha256, every
check on reading), and the record's field."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch.utils.data import TensorDataset

from benchbench.store import predictions as pf
from benchbench.precision import resolve as resolve_precision
from benchbench.store.record import Record
from benchbench_plugins.protocols.features import Features, fewshot_eval, shot_draws
from benchbench_plugins.protocols.subsets import random_subset, split_positions, take
from benchbench_plugins.protocols.training import evaluate

CPU = torch.device("cpu")


class Linear(torch.nn.Module):
    def __init__(self, w: torch.Tensor):
        super().__init__()
        self.w = w

    def forward(self, x):
        return x.flatten(1) @ self.w


def _data(n=60, classes=7, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(n, 1, 2, 2, generator=gen), torch.randint(0, classes, (n,), generator=gen), \
        torch.randn(4, classes, generator=gen)


def test_evaluate_keeps_each_images_predictions_of_a_subset():
    x, y, w = _data()
    test = random_subset(TensorDataset(x, y), 25, seed=3)  # a copy of the tensors: positions kept apart
    acc = evaluate(Linear(w), test, CPU, batch_size=4, precision=resolve_precision("fp32", CPU), keep_predictions=True)
    p = acc.predictions
    expect_index = torch.randperm(60, generator=torch.Generator().manual_seed(3))[:25]
    assert p.index.tolist() == expect_index.tolist() and p.label.tolist() == y[expect_index].tolist()
    probs = torch.softmax(x[expect_index].flatten(1) @ w, dim=1).numpy()  # independently: numpy's ranking
    order = np.argsort(-probs, axis=1, kind="stable")[:, :5]
    assert (p.top5 == order).all()
    np.testing.assert_allclose(p.p_top1, probs.max(1), rtol=1e-6)
    np.testing.assert_allclose(p.p_true, probs[np.arange(25), y[expect_index].numpy()], rtol=1e-6)
    assert p.hits().mean() == pytest.approx(acc.top1)
    off = evaluate(Linear(w), test, CPU, batch_size=4, precision=resolve_precision("fp32", CPU))
    assert off.predictions is None and off.top1 == acc.top1


def test_split_positions_compose_through_take_and_subset():
    ds = TensorDataset(torch.arange(10).float(), torch.arange(10))
    inner = take(ds, [9, 7, 5, 3, 1])
    assert split_positions(take(inner, [4, 0])).tolist() == [1, 9]
    assert split_positions(torch.utils.data.Subset(inner, [1, 2])).tolist() == [7, 5]
    assert split_positions(ds).tolist() == list(range(10))


def test_fewshot_predictions_by_shot_and_draw():
    gen = torch.Generator().manual_seed(0)
    y = torch.arange(120) % 4
    x = torch.eye(4)[y] * 3 + torch.randn(120, 4, generator=gen)
    train, test = Features(x[:80], y[:80], 0.0), Features(x[80:], y[80:], 0.0)
    draws = shot_draws(train.y, 4, [1, 5], seeds=3, seed=0)
    result = fewshot_eval(train, test, 4, draws, l2=1.0, index=torch.arange(80, 120))
    p = result.predictions
    assert p.axes == ("shot", "draw") and p.axis_values["shot"].tolist() == [1, 5]
    assert p.top5.shape == (2, 3, 40, 4) and p.p_true.shape == (2, 3, 40)
    for s, k in enumerate((1, 5)):
        assert p.hits()[s].mean(axis=1) == pytest.approx(result.top1[k])
        assert p.select(shot=s, draw=1).hits().mean() == pytest.approx(result.top1[k][1])


def _preds(n=50, classes=300):
    rng = np.random.default_rng(0)
    return pf.Predictions(np.arange(n) * 7, rng.integers(0, classes, n), rng.integers(0, classes, (n, 5)),
                          rng.random(n).astype(np.float32), rng.random(n).astype(np.float32))


def test_file_round_trip_small_types_and_size(tmp_path):
    p = _preds()
    ref = pf.save(tmp_path, "abc", p)
    assert ref["path"].startswith("predictions/abc--") and ref["images"] == 50
    assert not list((tmp_path / "predictions").glob(".*tmp"))  # renamed into place
    back = pf.load(tmp_path, ref, "abc")
    assert back.top5.dtype == np.uint16 and back.index.dtype == np.uint16 and back.label.dtype == np.uint16
    assert (back.top5 == p.top5).all() and (back.index == p.index).all() and back.axes == ()
    # index 2 + label 2 + top5 5 x 2 + two float32 8 = 22 bytes per image (300 classes)
    assert pf.bytes_per_image(p) == 22


def test_bad_files_are_named_not_crashed_on(tmp_path):
    ref = pf.save(tmp_path, "abc", _preds())
    path = tmp_path / ref["path"]
    with pytest.raises(pf.PredictionsError, match="of cell abc, not xyz"):
        pf.load(tmp_path, ref, "xyz")
    with pytest.raises(pf.PredictionsError, match="sha256 differs"):
        pf.load(tmp_path, {**ref, "sha256": "0" * 64}, "abc")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(pf.PredictionsError, match="cannot be read"):
        pf.load(tmp_path, {**ref, "sha256": pf.sha256_of(path)}, "abc")
    path.unlink()
    with pytest.raises(pf.PredictionsError, match="missing"):
        pf.load(tmp_path, ref, "abc")


def test_record_names_its_predictions_and_older_records_read():
    base = dict(key="k", status="ok", model="m", dataset="d", protocol="p", seed=0)
    ref = {"path": "predictions/k--1.npz", "sha256": "ab" * 32, "images": 3}
    rec = Record.from_json(json.loads(json.dumps(Record(**base, predictions=ref).to_json())))
    assert rec.predictions == ref
    old = Record(**base).to_json()
    assert "predictions" not in old and Record.from_json(old).predictions is None
    with pytest.raises(Exception, match="predictions"):
        Record.from_json({**old, "predictions": "x.npz"})


def test_linear_and_fewshot_cells_hand_their_predictions_to_the_record(catalog, tiny_data, protocol_context):
    from benchbench.specs import DataOptions

    data = DataOptions(root=tiny_data, image_size=28, in_chans=1)
    ctx = protocol_context("linear", {"test_subset": 20, "train_per_class": 3}, data=data)
    m = catalog.protocols.get("linear").run(ctx)
    p = m[pf.METRIC]
    assert p.images == 20 and p.hits().mean() == pytest.approx(m["top1"])
    ctx = protocol_context("fewshot", {"shots": [1, 2], "seeds": 2, "test_subset": 16}, data=data)
    m = catalog.protocols.get("fewshot").run(ctx)
    p = m[pf.METRIC]
    assert p.top5.shape[:3] == (2, 2, 16)
    assert p.hits()[1].mean() == pytest.approx(m["fewshot_2shot_top1"])


def test_a_cells_record_names_its_predictions_file_written_before_it(catalog, tiny_data, tmp_path):
    from benchbench.store.results import load
    from benchbench.plan.cell import make_cell
    from benchbench.run.context import RunContext
    from benchbench.run.worker import Job, execute
    from benchbench.settings import resolve
    from benchbench.specs import DataOptions
    from benchbench.store.rundir import read_records

    spec = catalog.protocols.get("linear")
    cell = make_cell(spec, "vit-mu7", "fashion-mnist", 0, resolve(spec, {"test_subset": 20, "train_per_class": 3},
                                                                   "linear"))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    context = RunContext(run_dir=run_dir, suite="t", device="cpu", data=DataOptions(root=tiny_data))
    record = execute(Job(context, cell), catalog=catalog)
    assert record.ok and pf.METRIC not in record.metrics and 0 <= record.metrics["ece"] <= 1
    (stored,) = read_records(run_dir).records
    ref = stored.predictions
    assert ref["images"] == 20 and ref["sha256"] == pf.sha256_of(run_dir / ref["path"])
    preds = pf.load(run_dir, ref, cell.key)
    assert preds.hits().mean() == pytest.approx(record.metrics["top1"])
    assert preds.index.max() < 10_000 and len(set(preds.index.tolist())) == 20  # positions in the test split
    assert load(run_dir)["predictions"].iloc[0] == ref
