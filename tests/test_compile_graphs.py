"""What torch.compile hands its backend under benchbench.execution.apply: one static graph per batch
shape (never a dynamic-shape graph that then serves the full batches too), compiled afresh for every
model, so that a cell's or a `profile --best` candidate's compile time is its own and no model runs
eagerly after torch's recompile limit while recorded as compiled.

The backend here only counts the graphs Dynamo gives it and runs them as they are (inductor's code
generation is not what is tested, and costs seconds a graph on the CPU); the compiled-against-eager
numerics with inductor are in tests/test_execution.py."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from benchbench.execution import Execution, apply

COMPILED = Execution(compile=True, compile_mode=None, fused_optimizer=False, channels_last=False)


class Graphs:
    """A torch.compile backend that records each graph it is given (dynamic or static) and each call."""

    def __init__(self):
        self.dynamic: list[bool] = []
        self.calls: list[int] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs):
        index = len(self.calls)
        self.calls.append(0)
        self.dynamic.append(any(isinstance(s, torch.SymInt) for x in example_inputs
                                for s in ((x,) if isinstance(x, torch.SymInt) else getattr(x, "shape", ()))))

        def run(*args):
            self.calls[index] += 1
            return gm.forward(*args)

        return run

    def ran(self, before: list[int]) -> list[int]:
        """The graphs called since `before` (a copy of `calls`)."""
        before = before + [0] * (len(self.calls) - len(before))
        return [i for i, (a, b) in enumerate(zip(before, self.calls)) if b > a]


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(x).relu()


def test_each_batch_shape_gets_its_own_static_graph_and_full_batches_keep_theirs():
    # a training run: full batches, an epoch's short last batch, full batches again
    graphs = Graphs()
    runner = apply(Net(), COMPILED, backend=graphs)
    ran = []
    for batch in (8, 8, 6, 8, 8):
        before = list(graphs.calls)
        runner(torch.randn(batch, 4))
        ran.append(graphs.ran(before))
    assert graphs.dynamic == [False, False]  # torch's default would give the short batch a dynamic graph
    assert ran == [[0], [0], [1], [0], [0]]  # ... which the later full batches would then run on


def test_every_model_compiles_afresh_past_the_recompile_limit():
    # `profile --best` and a suite's cells: many models of one class, many shapes, in one process.
    # Without a fresh cache the 9th graph of one forward would run eagerly, unnoticed.
    limit = torch._dynamo.config.recompile_limit
    graphs = Graphs()
    for i in range(limit + 2):
        model = Net()
        for memory in (False, True):
            runner = apply(model, COMPILED, backend=graphs)
            before = list(graphs.calls)
            out = runner(torch.randn(2 + i + 8 * memory, 4))
            assert graphs.ran(before) == [len(graphs.calls) - 1]  # a graph of its own, compiled now: not eager
            assert out.shape == (2 + i + 8 * memory, 3)
    assert not any(graphs.dynamic)


def test_a_model_past_the_limit_within_one_compile_is_an_error_not_an_eager_run():
    graphs = Graphs()
    runner = apply(Net(), COMPILED, backend=graphs)
    limit = torch._dynamo.config.recompile_limit
    for batch in range(1, limit + 1):
        runner(torch.randn(batch, 4))
    with pytest.raises(Exception, match="recompile_limit|recompile limit"):
        runner(torch.randn(limit + 1, 4))
    assert len(graphs.calls) == limit
