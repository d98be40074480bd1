"""Table layouts, plots and run comparison on hand-made records whose numbers are known."""

from __future__ import annotations

import math

import pytest

from benchbench.store import results
from benchbench.cli import main
from benchbench.report.plots import plot
from benchbench.store.rundir import append_record
from benchbench.report.tables import build_table, render


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
    from benchbench.report.plots import accuracy_vs_compute, family_styles

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
    from benchbench.report.tables import significant

    df = frame(rec("head", "d", "scratch", 0, 0.5, params=512 * 10 + 10), rec("vit-b16", "d", "scratch", 0, 0.5,
                                                                              params=86_567_656))
    for layout in ("models", "summary", "compute"):
        table = build_table(df, layout)
        column = table.headers.index("Params (M)")
        assert [row[column] for row in table.rows] == ["0.00513", "86.6"], layout
    assert [significant(x) for x in (304.3, 99.96, 1843.2, 0.0)] == ["304", "100", "1,843", "0"]


def test_summary_shows_each_cells_wall_seconds(rec):
    """Wall (s) is the record's own `wall_seconds` (a field of the record, not a metric)."""
    import dataclasses

    df = frame(dataclasses.replace(rec("vit", "fmnist", "scratch", 0, 0.8), wall_seconds=895.3442),
               dataclasses.replace(rec("bit", "fmnist", "scratch", 0, 0.7), wall_seconds=None))
    table = build_table(df, "summary")
    wall = table.headers.index("Wall (s)")
    assert [row[wall] for row in table.rows] == ["895.3", "-"]
    assert table.data.loc[0, "wall_seconds"] == 895.3442


def test_compute_layout_shows_a_training_cells_epochs_and_exaflops_as_paper_scaling_does(rec):
    """A cell trained from scratch is its own pre-training: its `train_epochs`, and exaFLOPs by the one
    formula (3 passes x 2 FLOPs per MAC x images seen), here the published paper-experiments scratch cell's
    (ViT-Mu/7: 3,615,104 MACs, 38,400 images, 0.64 epochs). A fine-tuning cell's pre-training is
    another cell's: its recorded pretrain_exaflops, and no epochs of its own (its train_epochs are
    fine-tuning epochs)."""
    df = frame(rec("vit", "fmnist", "scratch", 0, 0.82, macs=3_615_104, gmacs=0.003615104, train_epochs=0.64,
                   train_images_seen=38_400, train_exaflops=8.329199616e-07),
               rec("vit", "digits", "finetune", 0, 0.67, macs=3_615_104, gmacs=0.003615104, train_epochs=7.12,
                   train_images_seen=12_800, train_exaflops=2.8e-07, pretrain_images_seen=38_400,
                   pretrain_exaflops=8.329199616e-07))
    expected = 3 * 2 * 3_615_104 * 38_400 / 1e18
    assert expected == pytest.approx(8.329199616e-07)
    compute = build_table(df, "compute")
    epochs, exa = compute.headers.index("Epochs"), compute.headers.index("Pre-training exaFLOPs")
    assert [(row[epochs], row[exa]) for row in compute.rows] == [("0.64", "8.33e-07"), ("-", "8.33e-07")]
    assert compute.data.loc[0, "pretrain_epochs"] == 0.64
    assert compute.data.loc[0, "pretrain_exaflops"] == pytest.approx(expected)
    scaling = build_table(df, "paper-scaling")
    assert scaling.rows[0][1] == "0.64" and scaling.rows[0][-1] == "8.33e-07"


def _markdown_cells(text: str) -> list[list[str]]:
    """The cells of a markdown table as printed (padding kept), header and separator dropped."""
    lines = [line for line in text.splitlines() if line.startswith("|")]
    return [line.split("|")[1:-1] for line in lines[2:]]


def test_text_columns_are_left_aligned_and_numbers_right_aligned_in_every_layout(rec):
    df = frame(rec("vit", "fashion-mnist", "scratch", 0, 0.8, settings={"lr": 1e-3}, dataset_name="Fashion-MNIST",
                   pretrain_epochs=7, pretrain_exaflops=56.0),
               rec("bit-r50x1", "digits", "scratch", 0, 0.7, settings={"lr": 3e-3}, dataset_name="Digits (UCI)",
                   pretrain_epochs=7, pretrain_exaflops=52.0))
    for layout in ("models", "summary", "compute", "paper-transfer", "paper-scaling"):
        table = build_table(df, layout)
        text = render(table, "markdown")
        header = [h.strip() for h in text.splitlines()[0].split("|")[1:-1]]
        for row in _markdown_cells(text):
            for name, cell in zip(header, row):
                value = cell.strip()
                if value in ("", "-"):
                    continue
                numeric = value.replace(",", "").replace(".", "").replace("e-", "").isdigit()
                aligned = cell.startswith(f" {value} ") if not numeric else cell.endswith(f" {value} ")
                assert aligned, (layout, name, cell)
    latex = render(build_table(df, "compute"), "latex")
    assert latex.startswith("\\begin{tabular}{llrrrr}")  # Model, Data: text; the rest numbers


def test_paper_experiments_summary_reads_cleanly():
    """The published summary (paper-experiments): no `nan`, an integer setting as an integer, and in
    markdown, LaTeX and HTML no column that is the same in every row (those values are said once,
    under the table); CSV and JSON keep every column."""
    import io
    import json as _json
    from pathlib import Path

    import pandas as pd

    run = Path(__file__).resolve().parent.parent / "results" / "paper-experiments" / "20261123-135317"
    table = build_table(results.load(run), "summary")
    for fmt in ("markdown", "latex", "html"):
        text = render(table, fmt)
        assert "nan" not in text and "300.0" not in text and "300" in text, fmt
        assert "In every row: Model ViT-Mu/7; Seed 0" in text, fmt  # one model and one seed: said once
    markdown = render(table, "markdown")
    header = [h.strip() for h in markdown.splitlines()[0].split("|")[1:-1]]
    rows = [[c.strip() for c in row] for row in _markdown_cells(markdown)]
    assert len(rows) == 12
    assert all(len({row[i] for row in rows}) > 1 for i in range(len(header))), header
    assert "Model" not in header and "Status" not in header and "Dataset" in header and "steps" in header
    assert "In every row: Model ViT-Mu/7; Seed 0; Status ok; Params (M) 0.206; GMACs 0.003615." in markdown
    csv_text = render(table, "csv")
    csv = pd.read_csv(io.StringIO(csv_text))
    assert {"model_name", "seed", "status", "params", "gmacs", "setting.steps"} <= set(csv.columns)
    assert list(csv["setting.steps"].dropna()) == [300, 300, 100, 100, 100, 100, 100]
    assert ",300," in csv_text and "300.0" not in csv_text
    first = _json.loads(render(table, "json"))[0]
    assert first["setting.steps"] == 300 and first["model_name"] == "ViT-Mu/7"


def test_constant_columns_stay_where_the_header_is_fixed_or_there_is_one_row(rec):
    """compute's header is the paper's: its one dataset stays a column; a one-row summary keeps every column."""
    df = frame(rec("vit", "jft", "measure", 0, dataset_name="JFT-300M", pretrain_epochs=7, pretrain_exaflops=56.0,
                   accuracies={}),
               rec("bit", "jft", "measure", 0, dataset_name="JFT-300M", pretrain_epochs=7, pretrain_exaflops=52.0,
                   accuracies={}))
    text = render(build_table(df, "compute"), "markdown")
    assert text.splitlines()[0].split("|")[2].strip() == "Data" and text.count("JFT-300M") == 2
    one = render(build_table(frame(rec("vit", "fmnist", "scratch", 0, 0.8)), "summary"), "markdown")
    assert one.splitlines()[0].split("|")[1].strip() == "Model" and "In every row" not in one


def test_every_layout_aggregates_over_seeds_only(rec):
    """The issue's case: 4 training-set sizes x 2 seeds were one "mean ± std" in the models layout, as if
    they were 8 seeds (here it would print 12.63 ± 1.41); each size is now a row, the mean and sample std
    over its two seeds alone."""
    sizes = {1000: (0.10, 0.12), 5000: (0.12, 0.13), 20000: (0.13, 0.13), 60000: (0.13, 0.15)}
    df = frame(*(rec("vit", "fmnist", "scratch", seed, top1, settings={"train_subset": n, "lr": 0.1},
                     train_examples=n, train_device_days=1.0)
                 for n, pair in sizes.items() for seed, top1 in enumerate(pair)))
    table = build_table(df, "models")
    assert [r[0] for r in table.rows] == [f"VIT (train_subset={n})" for n in sizes]
    assert [r[3] for r in table.rows] == ["11.00 ± 1.41", "12.50 ± 0.71", "13.00 ± 0.00", "14.00 ± 1.41"]
    assert list(table.data["model"]) == [f"vit (train_subset={n})" for n in sizes]
    assert list(table.data["train_device_days"]) == [2.0] * 4  # each row's own cells
    # data-scaling spans the training-set size: one row, a column per size, each over its two seeds
    scaling = build_table(df, "data-scaling")
    assert len(scaling.rows) == 1 and scaling.rows[0][3:] == ["11.00 ± 1.41", "12.50 ± 0.71", "13.00 ± 0.00",
                                                             "14.00 ± 1.41"]
    intervals = build_table(df, "intervals")
    assert len(intervals.rows) == 4 and set(intervals.data["seeds"]) == {2}


def test_two_checkpoints_of_one_model_are_two_rows_named_by_their_contender(rec):
    df = frame(*(rec("vit", "fmnist", "evaluate", 0, top1, settings={"init": f"w/{name}.safetensors"})
                 for name, top1 in (("a", 0.80), ("b", 0.90))),
               rec("bit", "fmnist", "evaluate", 0, 0.7, settings={"init": "w/c.safetensors"}, family="bit"))
    table = build_table(df, "models")
    assert [(r[0], r[3]) for r in table.rows] == [("vit@a", "80.00"), ("vit@b", "90.00"), ("BIT", "70.00")]
    transfer = build_table(df, "paper-transfer")
    assert transfer.headers == ["", "vit@a", "vit@b", "BIT"]
    # another setting beside the weights: named after the contender
    df = frame(*(rec("vit", "fmnist", "evaluate", 0, 0.8, settings={"init": f"w/{w}.pt", "resize": r})
                 for w in ("a", "b") for r in (32, 36)))
    assert [r[0] for r in build_table(df, "models").rows] == ["vit@a (resize=32)", "vit@a (resize=36)",
                                                              "vit@b (resize=32)", "vit@b (resize=36)"]
    # the same weights in two protocols (columns of their own): one row
    df = frame(rec("vit", "fmnist", "scratch", 0, 0.8, settings={"lr": 0.1}),
               rec("vit", "fmnist", "evaluate", 0, 0.8, settings={"init": "w/a.pt"}))
    assert [r[0] for r in build_table(df, "models").rows] == ["VIT"]
