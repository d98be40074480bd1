"""The CLI end to end, on a few hundred images in Fashion-MNIST's on-disk format."""

import json
import textwrap
from pathlib import Path

import pytest

from benchbench.store import results
from benchbench.cli import main

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.expected(seconds=14)  # default step, 2 cores: started first, so that none runs alone at its end
def test_run_writes_records_env_and_prints_the_table(run_suite, tiny_suite, capsys):
    rc = run_suite.run(suite=tiny_suite)
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    (run_dir,) = (run_suite.results / "tiny").iterdir()
    records = run_suite.records()
    assert [r.model for r in records] == ["bit-r20x1-small", "vit-mu7"]
    for r in records:
        assert r.status == "ok" and r.error is None and r.flops_status == "ok"
        m = r.metrics
        assert m["train_images_seen"] == 6 * 300 and m["train_steps"] == 6 * 10
        assert m["train_examples"] == m["train_distinct_images"] == 300
        assert m["eval_images"] == 100
        assert m["train_device_days"] == pytest.approx(m["train_device_seconds"] / 86400)
        assert m["train_exaflops"] == pytest.approx(6 * m["macs"] * 1800 / 1e18)
        assert m["gflops"] == pytest.approx(2 * m["gmacs"])
        assert r.settings["epochs"] == 6 and r.dataset_plugin == "benchbench_plugins.datasets.fashion_mnist"
    # The data is learnable (class = position of a bright band): the CNN must have learnt it.
    assert records[0].metrics["top1"] > 0.9
    env = json.loads((run_dir / "env.json").read_text())
    assert env["versions"]["torch"] and env["device"] == "cpu" and env["suite"] == "tiny"
    assert "--data-root" in env["command"]
    assert "| BiT-R20x1 (28px) |" in captured.out and "Fashion-MNIST top-1 (%)" in captured.out
    assert (run_dir / "table.md").read_text() == captured.out
    df = run_suite.frame()
    assert list(df["status"]) == ["ok", "ok"]

    for fmt, marker in (("markdown", "| Model"), ("latex", "\\toprule"), ("csv", "model,model_name"),
                        ("html", "<table>"), ("json", '"params_m"')):
        assert main(["table", str(run_dir), "--format", fmt]) == 0
        assert marker in capsys.readouterr().out


def test_impossible_resolution_is_refused_before_anything_runs(run_suite, capsys):
    suite = run_suite.write("""
        [suite]
        models = ["vit-b16", "vit-mu7"]
        datasets = ["fashion-mnist"]
        protocols = ["scratch"]
    """, "mixed.toml")
    rc = run_suite.run()
    err = capsys.readouterr().err
    assert rc == 2 and str(suite) in err and "vit-b16 cannot take 28 px" in err and "multiple of 16" in err
    assert "resolution = 32 or 16" in err and "Traceback" not in err
    assert not run_suite.results.exists()


RAISING_PLUGIN = """
from benchbench import hookimpl
from benchbench.specs import ProtocolSpec

def run(ctx):
    ctx.model(__import__("torch").zeros(1, 1, 28, 28))  # some work, then the plugin's bug
    raise RuntimeError("plugin bug in the middle of a cell")

@hookimpl
def register_protocols(register):
    register(ProtocolSpec(id="explode", name="Explode", run=run))
"""


def test_failing_cell_is_recorded_and_the_suite_goes_on(run_suite, capsys):
    run_suite.plugin(RAISING_PLUGIN, "explode.py")
    run_suite.write("""
        [suite]
        models = ["vit-mu7"]
        datasets = ["fashion-mnist"]
        protocols = ["explode", "scratch"]
        [settings.scratch]
        steps = 1
    """, "mixed.toml")
    rc = run_suite.run()
    err = capsys.readouterr().err
    assert rc == 1 and "1 of 2 cells failed" in err
    (run_dir,) = (run_suite.results / "mixed").iterdir()
    failed, ok = run_suite.frame().to_dict("records")
    assert failed["status"] == "failed" and failed["error"] == "RuntimeError: plugin bug in the middle of a cell"
    assert failed["params"] > 0  # what was measured before the failure is kept
    record = run_suite.records()[0]
    assert "in run" in record.traceback and record.protocol_plugin.startswith("file:")
    assert ok["status"] == "ok"
    # Resuming retries only the failed cell (and it fails again): the done cell is not re-run.
    assert run_suite.run() == 1
    err = capsys.readouterr().err
    assert "1 done, 1 to run" in err and "ran 1 cell now" in err
    assert len(results.load(run_dir, all_attempts=True)) == 3 and len(results.load(run_dir)) == 2


def test_list_json_has_the_promised_fields(capsys, zoo_cache):
    """(The run's shared zoo cache: listing ~110 models counts their parameters, 26 s the first time.)"""
    assert main(["list", "models", "--json"]) == 0
    models = json.loads(capsys.readouterr().out)
    vit_b16 = next(m for m in models if m["id"] == "vit-b16")
    assert vit_b16["name"] == "ViT-B/16" and vit_b16["plugin"] == "benchbench_plugins.models.vit"
    assert vit_b16["family"] == "vit" and vit_b16["default_resolution"] == 224
    for kind in ("datasets", "protocols", "suites"):
        assert main(["list", kind, "--json"]) == 0
        rows = json.loads(capsys.readouterr().out)
        assert rows and all({"id", "name"} <= set(r) for r in rows)
    assert main(["list", "protocols"]) == 0 and "scratch" in capsys.readouterr().out


def test_plugin_flag_adds_a_model(tmp_path, capsys, zoo_cache):
    """(The run's shared zoo cache, as test_list_json_has_the_promised_fields: only the file's model is counted.)"""
    plugin = tmp_path / "my_plugin.py"
    plugin.write_text(textwrap.dedent("""
        from benchbench import hookimpl
        from benchbench.specs import ModelSpec
        from benchbench_plugins.models.vision_transformer import create

        @hookimpl
        def register_models(register):
            register(ModelSpec(id="my-vit", name="MyViT", family="vit", default_resolution=28,
                               build=lambda **kw: create("Mu", 4, **kw)))
    """))
    assert main(["list", "models", "--json", "--plugin", str(plugin)]) == 0
    mine = [m for m in json.loads(capsys.readouterr().out) if m["id"] == "my-vit"]
    assert mine and mine[0]["plugin"] == f"file:{plugin}"


def test_readme_plugin_example_works(tmp_path, capsys, zoo_cache):
    readme = (REPO / "README.md").read_text()
    code = readme.split("```python\n# my_models.py\n", 1)[1].split("```", 1)[0]
    (tmp_path / "my_models.py").write_text(code)
    assert main(["list", "models", "--json", "--plugin", str(tmp_path / "my_models.py")]) == 0
    (row,) = [m for m in json.loads(capsys.readouterr().out) if m["id"] == "vit-mu4-wide"]
    assert row["default_resolution"] == 28


def test_broken_plugin_warns_and_strict_fails(tmp_path, capsys, zoo_cache):
    """(The run's shared zoo cache, as test_list_json_has_the_promised_fields.)"""
    plugin = tmp_path / "bad.py"
    plugin.write_text("raise ImportError('needs a GPU library')\n")
    assert main(["list", "models", "--plugin", str(plugin)]) == 0
    assert "needs a GPU library" in capsys.readouterr().err
    assert main(["list", "models", "--plugin", str(plugin), "--strict-plugins"]) == 2
    assert "error: plugin" in capsys.readouterr().err


def test_console_script_errors_are_clear_without_traceback(run_suite, tmp_path):
    proc = run_suite.cli("run", "quickstrat", "--results", tmp_path)
    assert proc.returncode == 2
    assert "did you mean 'quickstart'?" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_suite.cli("table", tmp_path)
    assert proc.returncode == 2 and "no records.jsonl" in proc.stderr


def test_missing_data_stops_the_run_before_any_cell_with_how_to(run_suite, tmp_path, tiny_suite, monkeypatch,
                                                                capsys):
    from benchbench_plugins.datasets import fashion_mnist

    monkeypatch.setattr(fashion_mnist, "DEBIAN_DIR", tmp_path / "not-installed")
    run_suite.data = tmp_path / "empty"  # a folder without the dataset
    run_suite.data.mkdir()
    assert run_suite.run("--quick", suite=tiny_suite) == 2
    err = capsys.readouterr().err
    assert "2 cells read dataset 'fashion-mnist', which is not here" in err and "nothing was run" in err
    assert "apt-get install dataset-fashion-mnist" in err and "Traceback" not in err
    assert not run_suite.results.exists()  # nothing written
    assert run_suite.run("--quick", "--dry-run", suite=tiny_suite) == 2  # the plan, then what is missing
    out, err = capsys.readouterr()
    assert "Est. time" in out and "apt-get install dataset-fashion-mnist" in err


def test_data_gone_after_the_check_fails_the_cell_with_how_to(run_suite, tmp_path, tiny_suite, monkeypatch, capsys):
    from benchbench_plugins.datasets import fashion_mnist

    monkeypatch.setattr(fashion_mnist, "DEBIAN_DIR", tmp_path / "not-installed")
    monkeypatch.setattr(fashion_mnist, "available", lambda split, options: None)  # there at the check
    run_suite.data = tmp_path / "empty"
    run_suite.data.mkdir()
    assert run_suite.run("--quick", suite=tiny_suite) == 1
    (run_dir,) = (run_suite.results / "tiny").iterdir()
    for record in run_suite.frame(run_dir).to_dict("records"):
        assert "apt-get install dataset-fashion-mnist" in record["error"]
        assert record["params"] > 0  # measured before the failure, and kept


def test_info_prints_params_and_verified_flops(capsys):
    # The default run's full-size FLOP check (ViT-B/16 at 224, both counters); the other full-size traces
    # in tests/test_flops.py and tests/test_hybrid.py are `slow`.
    assert main(["info", "ViT-B/16", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["id"] == "vit-b16" and info["params"] == 86_567_656 and info["resolution"] == 224
    assert info["gmacs"] == pytest.approx(17.5638, abs=1e-4) and info["gflops"] == pytest.approx(2 * info["gmacs"])
    assert info["flops_status"] == "ok" and info["macs_second_count"] == info["macs"]
    assert main(["info", "vit-b16", "--resolution", "100"]) == 2
    assert "not divisible by patch size 16" in capsys.readouterr().err


def test_paper_compute_quick_projects_exaflops(run_suite, capsys):
    run_suite.data = run_suite.device = None  # measures, reads no data
    assert run_suite.run("--quick", suite="paper-compute") == 0
    out = capsys.readouterr().out
    assert "Pre-training exaFLOPs" in out and "| ViT-B/32 " in out
    (run_dir,) = (run_suite.results / "paper-compute").iterdir()
    df = run_suite.frame(run_dir)
    assert sorted(set(df["pretrain_epochs"])) == [7, 14]
    for _, r in df.iterrows():  # 3 x forward FLOPs x JFT-300M's 303M images x epochs
        assert r["pretrain_exaflops"] == pytest.approx(6 * r["macs"] * 303e6 * r["pretrain_epochs"] / 1e18)
        assert r["flops_status"] == "ok"
    assert "train_device_seconds" not in df.columns  # nothing was trained


@pytest.mark.slow  # ~4 s: the slow step runs it (default tests stay under 4 min on 2 cores)
def test_cost_flops_side_and_projection(capsys):
    assert main(["cost", "ViT-B/16", "--images", "303000000", "--epochs", "7", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["train_exaflops"] == pytest.approx(3 * out["gflops"] * 1e9 * 303e6 * 7 / 1e18)
    assert round(out["train_exaflops"]) == 224 and "projected_device_days" not in out  # paper: 224
    assert main(["cost", "vit-mu4", "--images", "60000", "--epochs", "2", "--device", "cpu", "--precision", "fp32",
                 "--batch-size", "8", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["batch_size"] == 8 and out["train_img_per_s"] > 0
    # the device-days are the images over the img/s alone: compile time (0 here, eager) is never in them
    assert out["projected_device_days"] == pytest.approx(120_000 / out["train_img_per_s"] / 86400)
    # its step time is remembered for the compile break-even, as a training cell's is
    from benchbench.meters import compile_costs

    steps = [e for e in compile_costs.read() if e["kind"] == "step" and e["model"] == "vit-mu4"]
    assert steps and steps[-1]["batch_size"] == 8 and steps[-1]["mode"] == "eager"
    assert steps[-1]["seconds"] == pytest.approx(1 / out["train_img_per_s"])
    # how it ran, beside the figure: the fields and the line `profile` prints (one function for both)
    assert (out["compiled"], out["compile_mode"], out["fused_optimizer"], out["channels_last"], out["attention"],
            out["execution_policy"], out["compile_s"], out["mode"]) == (False, None, False, False, "sdpa", "cpu", 0.0,
                                                                       "train")
    from benchbench.cli.cost_cmd import render

    assert "  execution     eager, for-each optimizer, contiguous, attention sdpa (policy cpu: eager off CUDA)\n" \
        in render(out) and "compile " not in render(out)
    compiled = render({**out, "compiled": True, "compile_mode": "default", "compile_s": 41.25})
    assert "  execution     compiled (default), for-each optimizer" in compiled
    assert "  compile       41.2 s (the untimed warm-up: compilation and its steps; not in img/s)" in compiled
    assert main(["cost", "vit-mu4", "--images", "600", "--epochs", "1", "--eager"]) == 2
    assert "--eager says how the training throughput is measured (add --device D to measure it) or projected (add " \
           "--project-to DEVICE)" in capsys.readouterr().err
    assert main(["cost", "vit-mu4", "--images", "0", "--epochs", "1"]) == 2
    assert "must be > 0" in capsys.readouterr().err
    assert main(["cost", "vit-mu4", "--epochs", "1"]) == 2
    assert "give --images N (images per epoch) or --dataset D" in capsys.readouterr().err


def test_cost_and_profile_choose_channels_last_from_the_model_spec():
    """The policy's channels-last comes from the family's ModelSpec (on CUDA; choose() needs no GPU to decide)."""
    import dataclasses

    import torch

    from benchbench.cli.common import execution_for
    from benchbench.execution import Request
    from benchbench.plugins import load_catalog

    spec = load_catalog().models.get("vit-mu4")
    model = torch.nn.Linear(2, 2)
    cuda = torch.device("cuda")
    assert execution_for(dataclasses.replace(spec, prefers_channels_last=True), cuda, model).channels_last
    assert not execution_for(spec, cuda, model).channels_last
    eager = execution_for(dataclasses.replace(spec, prefers_channels_last=True), cuda, model, Request(eager=True))
    assert (eager.compile, eager.fused_optimizer, eager.channels_last, eager.policy) == (False, False, False, "eager")
    assert not execution_for(dataclasses.replace(spec, prefers_channels_last=True), torch.device("cpu"), model).channels_last


FP8_OFF_CUDA = "error: precision 'fp8' needs a CUDA GPU of compute capability >= 8.9 (Hopper or Ada"


@pytest.mark.parametrize("argv, message", [
    (["profile", "vit-mu7", "--device", "cpu", "--mode", "train", "--precision", "fp8"], FP8_OFF_CUDA),
    (["profile", "vit-mu7", "--device", "cpu", "--mode", "train", "--best", "--precision", "fp8"], FP8_OFF_CUDA),
    (["cost", "vit-mu4", "--images", "600", "--epochs", "1", "--device", "cpu", "--precision", "fp8"], FP8_OFF_CUDA),
    (["device", "--device", "cpu", "--precision", "fp8"], FP8_OFF_CUDA),
    # whatever the device: fp8 is torchao's float8 *training*
    (["profile", "vit-mu7", "--device", "cpu", "--precision", "fp8"],
     "error: precision 'fp8' is torchao's float8 training (Linear layers whose forward and backward matmuls run "
     "in float8 with dynamic scaling); fp8 inference is a different method that this harness does not measure"),
])
def test_fp8_is_accepted_where_training_is_measured_and_refused_clearly_here(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_cost_states_its_head_and_takes_the_papers_from_the_dataset(capsys):
    # the paper's Table 6 row for ViT-B/16, 7 epochs of JFT-300M (303M images, 18,291 classes): 224 exaFLOPs
    assert main(["cost", "vit-b16", "--dataset", "jft", "--epochs", "7", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["num_classes"], out["images"], out["dataset"]) == (18_291, 303_000_000, "jft-300m")
    assert round(out["train_exaflops"]) == 224
    # a head of K classes on a width-H class token is H x K MACs: 18,291 classes cost H x 17,291 more than 1,000
    runs = {}
    for extra in (["--dataset", "jft"], ["--images", "1000"]):
        assert main(["cost", "vit-mu4", "--epochs", "1", "--json", *extra]) == 0
        runs[extra[0]] = json.loads(capsys.readouterr().out)
    assert runs["--images"]["num_classes_from"] == "the default" and runs["--images"]["num_classes"] == 1000
    assert (runs["--dataset"]["gmacs"] - runs["--images"]["gmacs"]) * 1e9 == pytest.approx(64 * 17_291)  # Mu: hidden 64
    assert main(["cost", "vit-mu4", "--dataset", "jft", "--epochs", "7", "--num-classes", "21843"]) == 0
    assert "a head of 21,843 classes (--num-classes)" in capsys.readouterr().out


def test_table_plot_compare_take_the_plugin_options(tmp_path, capsys):
    run = REPO / "results" / "quickstart" / "20261123-204828"
    good, bad = tmp_path / "good.py", tmp_path / "bad.py"
    good.write_text("from benchbench import hookimpl\n")
    bad.write_text("raise ImportError('needs a GPU library')\n")
    for argv in (["table", str(run)], ["compare", str(run), str(run)],
                 ["plot", str(run), "--kind", "accuracy-vs-compute", "-o", str(tmp_path / "f.png")]):
        assert main([*argv, "--plugin", str(good)]) == 0, argv
        capsys.readouterr()
        assert main([*argv, "--plugin", str(bad)]) == 0, argv  # reported, not fatal
        assert "needs a GPU library" in capsys.readouterr().err
        assert main([*argv, "--plugin", str(bad), "--strict-plugins"]) == 2, argv
        assert "error: plugin" in capsys.readouterr().err


def test_a_missing_run_directory_is_named_as_missing(tmp_path, capsys):
    assert main(["table", str(tmp_path / "nowhere")]) == 2
    assert f"{tmp_path / 'nowhere'}: no such file or directory" in capsys.readouterr().err
    assert main(["table", str(tmp_path)]) == 2
    assert "no records.jsonl here" in capsys.readouterr().err


def test_run_dir_resumes_only_a_run_that_exists_and_fresh_names_a_new_one(run_suite, tiny_suite, capsys):
    """--run-dir DIR resumes DIR; a mistyped DIR is an error naming the run it is nearest (never a new run
    made silently); --run-dir DIR --fresh starts one there, once; nothing asks a question."""
    run_suite.suite = str(tiny_suite)
    named = run_suite.dir / "runs" / "tiny-a"
    assert run_suite.run("--quick", "--run-dir", named, "--fresh") == 0
    assert len(run_suite.records(named)) == 2
    capsys.readouterr()
    assert run_suite.run("--quick", "--run-dir", run_suite.dir / "runs" / "tiny-b") == 2
    err = capsys.readouterr().err
    assert f"--run-dir {run_suite.dir / 'runs' / 'tiny-b'}: no such run directory; did you mean {named}?" in err
    assert "add --fresh" in err and not (run_suite.dir / "runs" / "tiny-b").exists()
    assert run_suite.run("--quick", "--run-dir", named, "--fresh") == 2
    assert "already holds a run; leave out --fresh to resume it" in capsys.readouterr().err
    assert run_suite.run("--quick", "--run-dir", named) == 0  # resumes: all done
    assert len(run_suite.records(named)) == 2


def test_a_data_root_that_names_no_folder_is_refused(run_suite, tiny_suite, capsys):
    run_suite.suite = str(tiny_suite)
    run_suite.data = run_suite.dir / "no-such-data"
    assert run_suite.run("--quick") == 2
    err = capsys.readouterr().err
    assert f"--data-root {run_suite.data}: no such folder" in err and not run_suite.results.exists()


def test_an_unknown_model_that_a_plugin_file_beside_the_suite_registers_is_named(run_suite, capsys):
    run_suite.write('[suite]\nmodels = ["vit-wide4"]\ndatasets = ["fashion-mnist"]\nprotocols = ["scratch"]\n')
    (run_suite.dir / "my_models.py").write_text(
        'from benchbench import hookimpl\n\n@hookimpl\ndef register_models(register):\n    pass  # "vit-wide4"\n')
    assert run_suite.run("--dry-run") == 2
    err = capsys.readouterr().err
    assert f"unknown model id 'vit-wide4'" in err and f"{run_suite.dir / 'my_models.py'} registers it: add --plugin" in err
    run_suite.write('[suite]\nmodels = ["vit-wide5"]\ndatasets = ["fashion-mnist"]\nprotocols = ["scratch"]\n')
    assert run_suite.run("--dry-run") == 2
    assert "needs --plugin FILE.py" in capsys.readouterr().err


def test_dry_run_and_run_warn_when_the_machine_is_overloaded(run_suite, tiny_suite, monkeypatch, capsys):
    from benchbench.runtime import threads
    loaded = threads.overload_warning  # the conftest's: quiet unless given a load
    monkeypatch.setattr(threads, "overload_warning", lambda: loaded([999.0, 999.0, 999.0]))
    assert run_suite.run("--quick", "--dry-run", suite=tiny_suite) == 0
    err = capsys.readouterr().err
    assert "warning: the load average is 999 on" in err and "will be inflated" in err


def test_threads_help_says_what_the_code_does():
    """Every command's --threads help: the CPUs the process may use, never the load of other processes
    (benchbench.runtime.threads no longer subtracts it: the thread count orders float sums)."""
    from benchbench.cli import COMMANDS, parser

    p = parser()
    sub = next(a for a in p._actions if a.__class__.__name__ == "_SubParsersAction")
    seen = 0
    for name, command in sub.choices.items():
        for action in command._actions:
            if "--threads" in action.option_strings:
                seen += 1
                assert "less the load" not in action.help and "never the load of other processes" in action.help, name
    assert seen >= 5 and len(COMMANDS) >= 16
