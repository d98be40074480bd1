"""What differs between the torch releases benchbench supports (pyproject: torch 2.11 to 2.14), decided
from the installed torch's signatures: a keyword that only some releases take is passed where the
callee declares it, and left out elsewhere. Never by catching a TypeError around a whole call, which
would also swallow a TypeError raised for another reason inside it.

Known differences in that range (tests/test_torchcompat.py checks every call benchbench makes against
the installed torch; CI runs it on 2.14 and, in .venv-oldest, on 2.11):
- `torch.distributed.launcher.api.LaunchConfig(shutdown_timeout=...)`: in 2.13 and 2.14, not in 2.11
  (2.12 unchecked), whose launcher gives stopping ranks a fixed 30 s before SIGKILL (benchbench.runtime.launch
  asks for 5 s where it can).
- `torch.compile(recompile_limit=..., name=..., isolate_recompiles=...)`: in 2.13 and 2.14, not in
  2.11, which has the process-wide `torch._dynamo.config.recompile_limit` only.
The same in the whole range, so no adaptation: `torch.distributed.fsdp.fully_shard` (public since 2.6),
`distribute_tensor(src_data_rank=...)`, `torch.distributed.checkpoint.state_dict`'s options,
`torch._dynamo.config.fail_on_recompile_limit_hit`, `torch.compiler.cudagraph_mark_step_begin`, and
torchao's `convert_to_float8_training(module, module_filter_fn=...)` (torchao 0.18 on, which loads its
kernels for torch 2.11 and newer).
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Callable


def takes(target: Callable | type) -> frozenset[str]:
    """The keyword names `target` (a function, a class, or a dataclass) declares. A `**kwargs` catch-all
    adds nothing: that it swallows a name does not mean the name is understood."""
    if dataclasses.is_dataclass(target) and isinstance(target, type):
        return frozenset(f.name for f in dataclasses.fields(target) if f.init)
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return frozenset(name for name, p in inspect.signature(target).parameters.items() if p.kind in kinds)


def accepted(target: Callable | type, **optional: Any) -> dict[str, Any]:
    """The keywords of `optional` that `target` takes (see `takes`), to pass as `**accepted(...)` beside
    the keywords every supported torch takes."""
    names = takes(target)
    return {name: value for name, value in optional.items() if name in names}
