"""No recompiles inside a cell (issue 33): a training cell compiled (forced) whose last training batch
and last evaluation batch are short compiles its training graph once, for the full batch, and never
again for a shape (Dynamo's own record of each recompile, `guard_failures`, and its graph count); it
evaluates every test image; and its figures are the eager cell's within float tolerance, BatchNorm's
running statistics included (the short batch is not padded: it runs through the uncompiled module).

Default tests compile with Dynamo + AOT autograd and no code generation (the "aot_eager" backend:
the same graphs and guards as inductor's, in a second); the slow one with inductor itself."""

from __future__ import annotations

import copy
import numpy as np
import pytest
import torch
from torch import nn

from benchbench.execution import EAGER, Execution
from benchbench.specs import DataOptions

TRAIN, TEST, BATCH, EVAL_BATCH = 44, 21, 8, 8  # 5 full training batches + 4 images; 2 full eval batches + 5


def _bn_cnn() -> nn.Module:
    """A tiny CNN with BatchNorm (whose batch statistics a padded batch would change) for 28 px, 1 channel."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3, stride=2), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                         nn.Linear(4 * 13 * 13, 10))


def _compiled(backend: str) -> Execution:
    return Execution(compile=True, compile_mode="default", fused_optimizer=False, channels_last=False,
                     policy="cpu", reason="compiled: asked (compile = true)", backend=backend)


def _run_cell(protocol_context, tiny_data, execution: Execution, start: nn.Module, **settings):
    """The scratch protocol's cell (training, then evaluation) of a copy of `start`; (model, metrics)."""
    from benchbench_plugins.protocols.cell_training import train_and_evaluate

    model = copy.deepcopy(start)
    s = {"train_subset": TRAIN, "test_subset": TEST, "batch_size": BATCH, "eval_batch_size": EVAL_BATCH,
         "epochs": 2, "precision": "fp32", "warmup_fraction": 0.0, "optimizer": "sgd", "lr": 0.05,
         "compile": True, **settings}
    ctx = protocol_context("scratch", s, model_id="bit-r20x1-small", model=model, execution=execution,
                           data=DataOptions(root=tiny_data, image_size=28, in_chans=1))
    return model, train_and_evaluate(ctx, model, "test")


def _check_one_graph_and_eager_figures(protocol_context, tiny_data, backend: str) -> None:
    from torch._dynamo.utils import counters, guard_failures

    start = _bn_cnn()
    eager_model, eager = _run_cell(protocol_context, tiny_data, EAGER, start, compile=False)
    graphs = counters["stats"]["unique_graphs"]
    model, m = _run_cell(protocol_context, tiny_data, _compiled(backend), start)
    reasons = [r for failures in guard_failures.values() for r in failures]
    assert not [r for r in reasons if "size" in r or "shape" in r], reasons  # never a recompile for a shape
    assert counters["stats"]["unique_graphs"] - graphs == 1  # the training graph, once
    assert m["exec_compile"] and m["compile_s"] > 0
    # every image of both epochs trained, every test image evaluated, each once in the predictions
    assert m["train_images_seen"] == eager["train_images_seen"] == 2 * TRAIN
    assert m["eval_images"] == eager["eval_images"] == TEST
    preds = m["predictions"]
    assert sorted(preds.index.tolist()) == sorted(eager["predictions"].index.tolist()) and len(preds.index) == TEST
    # the same figures as eager, within float32 rounding
    assert m["top1"] == eager["top1"] and m["top5"] == eager["top5"]
    assert m["train_loss"] == pytest.approx(eager["train_loss"], rel=1e-4)
    np.testing.assert_allclose(preds.p_true, eager["predictions"].p_true, rtol=1e-4, atol=1e-6)
    for a, b in zip(model.state_dict().values(), eager_model.state_dict().values()):  # BatchNorm's stats too
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_a_compiled_cell_with_short_last_batches_compiles_one_graph(protocol_context, tiny_data):
    _check_one_graph_and_eager_figures(protocol_context, tiny_data, "aot_eager")


@pytest.mark.slow
def test_a_cell_compiled_by_inductor_compiles_one_graph(protocol_context, tiny_data, tmp_path, monkeypatch):
    """The same with inductor's code generation (about a minute on 2 CPU cores in an empty cache)."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    _check_one_graph_and_eager_figures(protocol_context, tiny_data, "inductor")


def test_the_short_batch_runs_through_the_uncompiled_module(protocol_context, tiny_data):
    """The compiled module is called with full batches only; the short one reaches the model itself."""
    seen: list[tuple[str, int]] = []

    class Watched(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = _bn_cnn()

        def forward(self, x):
            seen.append(("compiled" if torch.compiler.is_compiling() else "eager", len(x)))
            return self.net(x)

    _run_cell(protocol_context, tiny_data, _compiled("aot_eager"), Watched(), epochs=1)
    training = seen[:len(seen) - 3]  # the last 3 calls are evaluation's (eager, as every cell evaluates)
    assert training[0] == ("compiled", BATCH)  # traced once, for the full batch
    assert ("eager", TRAIN % BATCH) in training and all(n == BATCH for kind, n in training if kind == "compiled")
    assert seen[-3:] == [("eager", EVAL_BATCH), ("eager", EVAL_BATCH), ("eager", TEST % EVAL_BATCH)]
