"""Every torch pyproject claims: the calls whose keywords differ between releases adapt by signature
(benchbench/runtime/torchcompat.py), and every version-sensitive call benchbench makes exists, with the
keywords it passes, in the installed torch. CI runs this on torch 2.14 (.venv) and 2.11 (.venv-oldest,
tests/test_oldest_torch.py), so each claimed end of the range is checked."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import torch

from benchbench.runtime import launch
from benchbench.runtime.rendezvous import Rendezvous
from benchbench.runtime.torchcompat import accepted, takes

ROOT = Path(__file__).resolve().parent.parent


def _version(text: str) -> tuple[int, int]:
    major, minor = re.match(r"(\d+)\.(\d+)", text).groups()
    return int(major), int(minor)


TORCH = _version(torch.__version__)


def test_pyproject_claims_the_installed_torch():
    text = (ROOT / "pyproject.toml").read_text()
    low, high = re.search(r'"torch>=(\d+\.\d+),<(\d+\.\d+)"', text).groups()
    assert _version(low) <= TORCH < _version(high), f"torch {torch.__version__} is outside pyproject's {low}..<{high}"


def test_accepted_keeps_the_keywords_the_callee_declares():
    @dataclasses.dataclass
    class Old:
        a: int = 0

    @dataclasses.dataclass
    class New:
        a: int = 0
        later: int = 5

    assert accepted(Old, later=1) == {} and accepted(New, later=1) == {"later": 1}

    def f(a, /, b, *, c=1, **kwargs):
        return a

    assert takes(f) == {"b", "c"}  # a positional-only name is no keyword; **kwargs proves nothing
    assert accepted(f, a=1, b=2, c=3, d=4) == {"b": 2, "c": 3}


@pytest.mark.parametrize("rdzv", [Rendezvous(1, 0, "127.0.0.1", 0), Rendezvous(2, 1, "10.0.0.1", 29500)])
def test_the_launch_config_of_the_installed_torch(rdzv):
    from torch.distributed.launcher.api import LaunchConfig

    config = launch.launch_config(rdzv, 2)
    assert (config.nproc_per_node, config.min_nodes, config.max_nodes, config.max_restarts) == (2, rdzv.nodes,
                                                                                                  rdzv.nodes, 0)
    assert config.rdzv_backend == ("c10d" if rdzv.local else "static")
    has_timeout = "shutdown_timeout" in {f.name for f in dataclasses.fields(LaunchConfig)}
    if TORCH == (2, 11):  # torch 2.11's launcher has no such setting (it failed there before this module)
        assert not has_timeout
    elif TORCH >= (2, 13):
        assert has_timeout
    if has_timeout:
        assert config.shutdown_timeout == launch.SHUTDOWN_TIMEOUT_S


def test_a_launcher_without_shutdown_timeout_gets_the_rest(monkeypatch):
    """torch 2.11's LaunchConfig, made from the installed one without the field: the config builds."""
    import torch.distributed.launcher.api as api

    fields = [(f.name, f.type, f) for f in dataclasses.fields(api.LaunchConfig) if f.name != "shutdown_timeout"]
    old = dataclasses.make_dataclass("LaunchConfig", fields)
    monkeypatch.setattr(api, "LaunchConfig", old)
    config = launch.launch_config(Rendezvous(1, 0, "127.0.0.1", 0), 3)
    assert type(config) is old and config.nproc_per_node == 3 and not hasattr(config, "shutdown_timeout")


# The version-sensitive calls benchbench makes with keywords every supported torch takes: where each
# is made, and the names it passes. A release that renames one fails here before it fails a cell.
CALLS = [
    ("benchbench/runtime/launch.py", "torch.distributed.launcher.api", "LaunchConfig",
     {"min_nodes", "max_nodes", "nproc_per_node", "run_id", "rdzv_backend", "rdzv_endpoint", "rdzv_configs",
      "max_restarts", "monitor_interval", "start_method", "local_addr"}),
    ("plugins/protocols/sharding.py", "torch.distributed.tensor", "distribute_tensor", {"src_data_rank"}),
    ("plugins/protocols/sharding.py", "torch.utils.checkpoint", "checkpoint", {"use_reentrant"}),
    ("plugins/protocols/distributed.py", "torch.distributed.checkpoint.state_dict", "StateDictOptions",
     {"full_state_dict", "cpu_offload"}),
    ("plugins/protocols/distributed.py", "torch.distributed.checkpoint.state_dict", "get_model_state_dict",
     {"options"}),
    ("benchbench/execution.py", "torch", "compile", {"mode", "dynamic", "backend"}),
    ("benchbench/weights/checkpoints.py", "torch", "load", {"map_location", "weights_only", "mmap"}),
]


@pytest.mark.parametrize("where, module, name, keywords", CALLS, ids=[c[2] for c in CALLS])
def test_each_call_takes_the_keywords_benchbench_passes(where, module, name, keywords):
    import importlib

    assert name in (ROOT / where).read_text(), f"{where} no longer calls {name}: update this list"
    target = getattr(importlib.import_module(module), name)
    assert keywords <= takes(target), f"torch {torch.__version__}'s {module}.{name} lacks {keywords - takes(target)}"


def test_the_names_benchbench_imports_or_sets_exist():
    from torch.distributed.fsdp import fully_shard  # public here since torch 2.6: no older location needed
    from torch.distributed.launcher.api import elastic_launch

    assert callable(fully_shard) and callable(elastic_launch)
    assert hasattr(torch._dynamo.config, "fail_on_recompile_limit_hit")  # set by benchbench/execution.py
    assert callable(torch.compiler.cudagraph_mark_step_begin)
    # inductor's on-disk caches as benchbench/execution.py and compile_costs.py turn them on and read them
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config
    from torch._dynamo.exc import TorchDynamoException  # noqa: F401 - plugins/protocols/training.py's test
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    assert isinstance(inductor_config.fx_graph_cache, bool) and isinstance(functorch_config.enable_autograd_cache, bool)
    assert isinstance(torch.compiler.config.force_disable_caches, bool) and default_cache_dir()
    assert "device" in takes(torch.amp.GradScaler)


def test_torchao_float8_takes_the_filter():
    pytest.importorskip("torchao")
    from torchao.float8 import convert_to_float8_training

    assert "module_filter_fn" in takes(convert_to_float8_training)
