"""Paired comparisons from kept predictions: models within a run (`compare RUN --models`) and run
against run, pinned to scipy's binomial test; bad predictions files fall back to the unpaired tests."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from benchbench.store import predictions as pf
from benchbench.store import results
from benchbench.cli import main
from benchbench.judge.compare import compare
from benchbench.store.rundir import append_record

scipy_stats = pytest.importorskip("scipy.stats")
N = 1000


def _hits(right: np.ndarray, classes: int = 10, shift: int = 0) -> pf.Predictions:
    """Predictions of N images, label (i + shift) % classes, top-1 right exactly where `right`."""
    label = (np.arange(len(right)) + shift) % classes
    top1 = np.where(right, label, (label + 1) % classes)
    top5 = np.stack([(top1 + j) % classes for j in range(5)], axis=1)
    p = np.full(len(right), 0.7, dtype=np.float32)
    return pf.Predictions(np.arange(len(right)), label, top5, p, p)


def _pattern(a_right: int, b_only: int, a_only: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A right on `a_right` images; B right on the same except `a_only` of them, plus `b_only` others."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(N)
    a = np.zeros(N, bool)
    a[order[:a_right]] = True
    b = a.copy()
    b[order[:a_only]] = False
    b[order[a_right:a_right + b_only]] = True
    return a, b


@pytest.fixture
def run(tmp_path, make_record):
    """run(name, {model: [right per seed]}) -> a run directory with predictions for every cell."""
    def write(name, cells, *, keep=True, index_shift=0, per_seed_shift=0, label_shift=0):
        path = tmp_path / name
        path.mkdir()
        for model, per_seed in cells.items():
            for seed, right in enumerate(per_seed):
                rec = make_record(model, "d", "scratch", seed, float(right.mean()), settings={"lr": 0.1})
                if keep:
                    preds = _hits(right, shift=label_shift)
                    preds = replace(preds, index=preds.index + index_shift + seed * per_seed_shift)
                    rec = replace(rec, predictions=pf.save(path, rec.key, preds))
                append_record(path, rec)
        return path
    return write


def test_models_within_a_run_exact_mcnemar_and_holm(run, capsys):
    a, b = _pattern(800, 40, 15)
    _, c = _pattern(800, 22, 20, seed=0)
    path = run("r", {"vit": [a], "bit": [b], "r50": [c]})
    assert main(["compare", str(path), "--models", "vit", "bit", "r50", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)["comparisons"]
    assert [(r["model_a"], r["model_b"]) for r in out] == [("vit", "bit"), ("vit", "r50"), ("bit", "r50")]
    raw = []
    for r, (x, y) in zip(out, ((a, b), (a, c), (b, c))):
        b_only, a_only = int((y & ~x).sum()), int((x & ~y).sum())
        raw.append(scipy_stats.binomtest(b_only, b_only + a_only, 0.5).pvalue)
        assert r["test"] == "exact McNemar (paired, two-sided)" and r["n_images"] == N
        assert r["p_value"] == pytest.approx(raw[-1], rel=1e-9)
        assert r["diff"] == pytest.approx(y.mean() - x.mean())
        assert r["diff_ci95"][0] <= r["diff"] <= r["diff_ci95"][1]
    # Holm by hand: the smallest times 3, the next times 2 (kept monotone), the largest times 1
    order = np.argsort(raw)
    expect = np.empty(3)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (3 - rank) * raw[i]))
        expect[i] = running
    assert [r["p_adjusted"] for r in out] == pytest.approx(list(expect), rel=1e-9)
    assert out[0]["verdict"] == ("bit better" if expect[0] < 0.05 else "no significant difference")
    assert main(["compare", str(path), "--models", "vit", "bit"]) == 0
    text = capsys.readouterr()
    assert "exact McNemar (paired, two-sided)" in text.out and "seeds paired seed by seed" in text.err


def test_seeds_pair_seed_by_seed_and_discordant_images_add_up(run, capsys):
    (a0, b0), (a1, b1) = _pattern(700, 30, 10, seed=1), _pattern(720, 25, 12, seed=2)
    path = run("r", {"vit": [a0, a1], "bit": [b0, b1]})
    assert main(["compare", str(path), "--models", "vit", "bit", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["comparisons"]
    assert row["p_value"] == pytest.approx(scipy_stats.binomtest(55, 77, 0.5).pvalue, rel=1e-9)
    assert row["diff"] == pytest.approx(((b0.mean() - a0.mean()) + (b1.mean() - a1.mean())) / 2)
    assert row["seeds"] == "2 vs 2"


def test_seeds_on_different_test_subsets_pair_within_each_seed(run, capsys):
    (a0, b0), (a1, b1) = _pattern(700, 30, 10, seed=1), _pattern(720, 25, 12, seed=2)
    path = run("r", {"vit": [a0, a1], "bit": [b0, b1]}, per_seed_shift=N)  # seed 1 saw other images
    assert main(["compare", str(path), "--models", "vit", "bit", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["comparisons"]
    assert row["test"] == "exact McNemar (paired, two-sided)"
    assert row["p_value"] == pytest.approx(scipy_stats.binomtest(55, 77, 0.5).pvalue, rel=1e-9)
    assert row["diff"] == pytest.approx(((b0.mean() - a0.mean()) + (b1.mean() - a1.mean())) / 2)
    assert "resampled on their own" in row["how"]


def test_unknown_model_and_too_few_are_bad_input(run, capsys):
    path = run("r", {"vit-b16": [_pattern(800, 1, 1)[0]], "bit": [_pattern(800, 1, 1)[1]]})
    assert main(["compare", str(path), "--models", "vit-b61", "bit"]) == 2
    assert "did you mean 'vit-b16'?" in capsys.readouterr().err
    assert main(["compare", str(path), "--models", "bit"]) == 2
    assert main(["compare", str(path)]) == 2


def test_models_without_predictions_use_welch_or_no_test(run, capsys):
    a, b = _pattern(800, 40, 15)
    path = run("r", {"vit": [a], "bit": [b]}, keep=False)
    assert main(["compare", str(path), "--models", "vit", "bit", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["comparisons"]
    assert row["test"].startswith("none") and row["p_value"] is None and row["verdict"] == "not tested"
    # two seeds each, no predictions: Welch's two-sided t-test over the seeds' accuracies (scipy)
    (a0, b0), (a1, b1) = _pattern(700, 30, 10, seed=1), _pattern(720, 25, 12, seed=2)
    path = run("r2", {"vit": [a0, a1], "bit": [b0, b1]}, keep=False)
    assert main(["compare", str(path), "--models", "vit", "bit", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["comparisons"]
    ref = scipy_stats.ttest_ind([b0.mean(), b1.mean()], [a0.mean(), a1.mean()], equal_var=False).pvalue
    assert row["test"] == "Welch's t-test (two-sided, over seeds)" and row["p_value"] == pytest.approx(ref, rel=1e-9)


def test_run_against_run_pairs_images_and_gates(run, capsys):
    a, b = _pattern(800, 10, 45)  # B loses 35 images net: -3.5 points
    base, new = run("a", {"vit": [a]}), run("b", {"vit": [b]})
    df = compare(results.load(base), results.load(new), dirs=(base, new))
    row = df.set_index("metric").loc["top1"]
    assert row["test"] == "exact McNemar (paired, one-sided)" and row["n_images"] == N
    assert row["p_value"] == pytest.approx(scipy_stats.binomtest(10, 55, 0.5, alternative="less").pvalue, rel=1e-9)
    assert row["regression"] and row["diff"] == pytest.approx(-0.035)
    # without the run directories, today's single-seed threshold (5 points) sees no regression
    plain = compare(results.load(base), results.load(new)).set_index("metric").loc["top1"]
    assert not plain["regression"] and plain["test"].startswith("threshold")
    assert main(["compare", str(base), str(new), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    (top1,) = [r for r in out["comparisons"] if r["metric"] == "top1"]
    assert {"test", "p_value", "p_adjusted", "diff", "diff_ci95", "n_images"} <= set(top1)


def test_bad_predictions_fall_back_to_the_unpaired_test(run, capsys):
    a, b = _pattern(800, 10, 45)
    base, new = run("a", {"vit": [a]}), run("b", {"vit": [b]})
    (file,) = (new / "predictions").glob("*.npz")
    data = file.read_bytes()

    def verdict():
        row = compare(results.load(base), results.load(new), dirs=(base, new)).set_index("metric").loc["top1"]
        return row["test"], row["rule"]

    file.write_bytes(data[:100])  # truncated: its sha256 no longer matches either
    test, rule = verdict()
    assert test.startswith("threshold") and "sha256 differs" in rule
    file.unlink()
    test, rule = verdict()
    assert test.startswith("threshold") and "is missing" in rule
    # a file of another cell, with the record's sha256: named as such
    other = pf.save(new, "someone-else", _hits(b))
    (new / other["path"]).rename(file)
    lines = (new / "records.jsonl").read_text().splitlines()
    obj = json.loads(lines[0])
    obj["predictions"]["sha256"] = other["sha256"]
    (new / "records.jsonl").write_text(json.dumps(obj) + "\n")
    test, rule = verdict()
    assert test.startswith("threshold") and "of cell someone-else" in rule
    assert main(["compare", str(base), str(new)]) == 0  # no crash; the threshold sees no regression


def test_different_test_images_are_not_paired(run):
    a, b = _pattern(800, 10, 45)
    base, new = run("a", {"vit": [a]}), run("b", {"vit": [b]}, index_shift=500)
    row = compare(results.load(base), results.load(new), dirs=(base, new)).set_index("metric").loc["top1"]
    assert "different test images" in row["rule"] and "500 in common" in row["rule"]


def test_the_same_index_with_other_labels_is_not_paired(run):
    """A test set reordered under the same dataset id: the indices match, the labels do not."""
    a, b = _pattern(800, 10, 45)
    base, new = run("a", {"vit": [a]}), run("b", {"vit": [b]}, label_shift=3)
    row = compare(results.load(base), results.load(new), dirs=(base, new)).set_index("metric").loc["top1"]
    assert row["test"].startswith("threshold") and row["n_images"] is None
    assert f"not paired: not the same images: seed 0: {N} of {N} images have another label under the same index" \
        in row["rule"]
