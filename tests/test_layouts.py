"""Table layouts, plots and run comparison on hand-made records whose numbers are known."""

from __future__ import annotations

import math

import pytest

from benchbench import results
from benchbench.cli import main
from benchbench.plots import plot
from benchbench.store import append_record
from benchbench.tables import build_table, render


@pytest.fixture
def rec(make_record):
    return make_record


def shots(*ks):
    """The accuracies a few-shot cell declares (protocol fewshot's spec)."""
    return {f"fewshot_{k}shot_top1": f"{k}-shot" for k in ks}


def frame(*records):
    return results.frame(list(records))


def test_transfer_layout_is_datasets_by_models_with_device_days_last(rec):
    df = frame(
        rec("vit", "cifar10", "finetune", 0, 0.9850, train_device_days=0.5),
        rec("vit", "cifar10", "finetune", 1, 0.9860, train_device_days=0.5),
        rec("bit", "cifar10", "finetune", 0, 0.9700, family="bit", train_device_days=2.0),
        rec("vit", "pets", "fewshot", 0, fewshot_1shot_top1=0.40, fewshot_1shot_top1_std=0.02,
            fewshot_10shot_top1=0.80, fewshot_10shot_top1_std=0.01, accuracies=shots(1, 10)),
    )
    table = build_table(df, "paper-transfer")
    assert table.headers == ["", "VIT", "BIT"]
    assert [r[0] for r in table.rows] == ["Cifar10", "Pets 1-shot", "Pets 10-shot",
                                          "Device-days (all training in this run)"]
    assert table.rows[0][1] == "98.55 ± 0.07"  # mean, sample std of 98.50 and 98.60
    assert table.rows[0][2] == "97.00"
    assert table.rows[1][1:] == ["40.00 ± 2.00", "-"]  # one few-shot cell: the std over its own draws
    assert table.rows[3][1:] == ["1", "2"]
    assert "98.55 $\\pm$ 0.07" in render(table, "latex")


def test_scaling_layout_groups_model_and_epochs_with_exaflops(rec):
    df = frame(
        rec("vit", "fmnist", "scratch", 0, 0.80, settings={"epochs": 7}, train_epochs=7.0, train_exaflops=1.5),
        rec("vit", "fmnist", "scratch", 1, 0.82, settings={"epochs": 7}, train_epochs=7.0, train_exaflops=1.5),
        rec("vit", "fmnist", "scratch", 0, 0.85, settings={"epochs": 14}, train_epochs=14.0, train_exaflops=3.0),
        rec("bit", "jft", "measure", 0, family="bit", pretrain_epochs=7.0, pretrain_exaflops=9.5, accuracies={}),
    )
    table = build_table(df, "paper-scaling")
    assert table.headers == ["Model", "Epochs", "Fmnist top-1 (%)", "Pre-training exaFLOPs"]
    assert table.rows == [["VIT", "7", "81.00 ± 1.41", "1.5"], ["VIT", "14", "85.00", "3"], ["BIT", "7", "-", "9.5"]]


def test_data_scaling_layout_has_a_column_per_training_set_size(rec):
    df = frame(*(rec(m, "fmnist", "scratch", s, acc + 0.01 * s, settings={"train_subset": n}, train_examples=n)
                 for m, accs in (("vit", (0.70, 0.85)), ("bit", (0.78, 0.86)))
                 for n, acc in zip((1000, 60000), accs) for s in (0, 1)))
    table = build_table(df, "data-scaling")
    assert table.headers[3:] == ["1,000 train images: top-1 (%)", "60,000 train images: top-1 (%)"]
    assert table.rows[0][3:] == ["70.50 ± 0.71", "85.50 ± 0.71"]
    assert table.rows[1][0] == "BIT" and table.rows[1][3] == "78.50 ± 0.71"
    assert table.data.loc[1, "60000:top1_pct"] == pytest.approx(86.5)


def test_summary_layout_shows_varying_settings_and_failures(rec):
    df = frame(rec("vit", "fmnist", "scratch", 0, 0.8, settings={"lr": 1e-3, "epochs": 1}),
               rec("vit", "fmnist", "scratch", 0, status="failed", settings={"lr": 3e-3, "epochs": 1}))
    table = build_table(df, "summary")
    assert table.headers[:6] == ["Model", "Dataset", "Protocol", "Seed", "lr", "Status"]  # epochs does not vary
    assert table.rows[0][4:7] == ["0.001", "ok", "80.00"]
    assert table.rows[1][5] == "failed: RuntimeError: boom"


def _write_run(path, records):
    path.mkdir(parents=True)
    for r in records:
        append_record(path, r)
    return path


def test_plots_are_written_and_bad_requests_are_clear(tmp_path, capsys, rec):
    run = _write_run(tmp_path / "run", [
        rec(m, "fmnist", "scratch", s, acc + 0.01 * s, family=f, settings={"train_subset": n}, train_examples=n,
            train_exaflops=n * 1e-9)
        for m, f, accs in (("vit", "vit", (0.7, 0.85)), ("bit", "bit", (0.78, 0.86)))
        for n, acc in zip((1000, 60000), accs) for s in (0, 1)])
    for kind, name in (("data-scaling", "ds.png"), ("accuracy-vs-compute", "avc.svg")):
        assert main(["plot", str(run), "--kind", kind, "-o", str(tmp_path / name)]) == 0
        assert (tmp_path / name).stat().st_size > 1000
    assert (tmp_path / "ds.png").read_bytes()[:4] == b"\x89PNG"
    assert main(["plot", str(run), "--kind", "data-scaling", "-o", str(tmp_path / "x.txt")]) == 2
    assert "must end in one of .png, .svg, .pdf" in capsys.readouterr().err
    with pytest.raises(Exception, match="no cell records both top-1 and its training-set size"):
        plot(frame(rec("vit", "d", "measure", 0, accuracies={})), "data-scaling", tmp_path / "y.png")


def test_data_scaling_without_a_size_sweep_says_why(tmp_path, capsys, rec):
    one_size = _write_run(tmp_path / "run", [rec(m, "fmnist", "scratch", 0, 0.8, train_examples=60000)
                                             for m in ("vit", "bit")])
    assert main(["plot", str(one_size), "--kind", "data-scaling", "-o", str(tmp_path / "d.png")]) == 2
    err = capsys.readouterr().err
    assert "every cell trained on the same number of images (60,000)" in err and "train_subset" in err
    assert not (tmp_path / "d.png").exists()


def test_figures_are_readable(rec):
    """A short log axis gets labelled ticks, no point label leaves the figure, the legend covers no point."""
    from benchbench.plots import accuracy_vs_compute, family_styles

    # exaFLOPs 1.3e-6 .. 2.5e-6 (the quickstart's: less than a decade); the rightmost point has a long name
    df = frame(rec("vit-mu7", "fmnist", "scratch", 0, 0.8377, train_exaflops=1.3e-6),
               rec("r8x1+vit-mu4-with-a-long-name", "fmnist", "scratch", 0, 0.8857, family="hybrid",
                   train_exaflops=2.5e-6))
    fig = accuracy_vs_compute(df, styles=family_styles([]))
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    (ax,) = fig.axes
    labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    assert len(labels) >= 2 and r"$2\times10^{-6}$" in labels
    figure_box = fig.bbox
    texts = [c for c in ax.get_children() if type(c).__name__ == "Annotation"]
    assert len(texts) == 2
    for text in texts:
        box = text.get_window_extent(renderer)
        assert figure_box.x0 <= box.x0 and box.x1 <= figure_box.x1 and figure_box.y0 <= box.y0 and box.y1 <= figure_box.y1
        axes_box = ax.get_window_extent(renderer)  # inside the panel too: no neighbour is overwritten
        assert axes_box.x0 <= box.x0 and box.x1 <= axes_box.x1 and axes_box.y0 <= box.y0 and box.y1 <= axes_box.y1
    (legend,) = fig.legends
    legend_box = legend.get_window_extent(renderer)
    for collection in ax.collections:
        for x, y in ax.transData.transform(collection.get_offsets()):
            assert not legend_box.contains(x, y)


def test_layout_errors_name_the_allowed_values(rec):
    with pytest.raises(Exception, match="allowed: models, summary, paper-transfer"):
        build_table(frame(rec("vit", "d", "scratch", 0, 0.5)), "paper")
    assert not math.isnan(build_table(frame(rec("vit", "d", "scratch", 0, 0.5)), "models").data["gmacs"][0])


def test_models_layout_keeps_protocols_apart(rec):
    """scratch, fine-tune and few-shot accuracies of one dataset are different numbers: one column each."""
    df = frame(rec("vit", "fmnist", "scratch", 0, 0.80), rec("vit", "fmnist", "finetune", 0, 0.85),
               rec("vit", "fmnist", "fewshot", 0, fewshot_5shot_top1=0.70, fewshot_5shot_top1_std=0.01,
                   top1=0.70, accuracies=shots(5)),
               rec("bit", "fmnist", "scratch", 0, status="failed", family="bit"))
    table = build_table(df, "models")
    assert table.headers[3:6] == ["Fmnist (scratch) top-1 (%)", "Fmnist (finetune) top-1 (%)",
                                  "Fmnist (fewshot) 5-shot top-1 (%)"]
    assert table.rows[0][3:6] == ["80.00", "85.00", "70.00 ± 1.00"]
    assert table.rows[1][3:6] == ["failed", "-", "-"]


def test_params_keep_three_significant_digits(rec):
    """5,130 parameters (a 512 -> 10 linear head: 512 x 10 + 10) are 0.00513 M, not 0.01."""
    from benchbench.tables import significant

    df = frame(rec("head", "d", "scratch", 0, 0.5, params=512 * 10 + 10), rec("vit-b16", "d", "scratch", 0, 0.5,
                                                                              params=86_567_656))
    for layout in ("models", "summary", "compute"):
        table = build_table(df, layout)
        column = table.headers.index("Params (M)")
        assert [row[column] for row in table.rows] == ["0.00513", "86.6"], layout
    assert [significant(x) for x in (304.3, 99.96, 1843.2, 0.0)] == ["304", "100", "1,843", "0"]
