"""Running one function in many processes, one per device, with torch's elastic launcher (what
torchrun uses): the device check before the launch, each rank's process group, and a failed rank's
error as the caller's exception.

Each rank runs `entry(*args)` (a top-level, importable function; its arguments are pickled). What
a rank raises is written to the launch's folder before the rank fails, so the caller reports the
rank's own error; a rank that died without a word (a signal, os._exit) is reported by its exit.
The launcher stops the other ranks (SIGTERM, then SIGKILL after SHUTDOWN_TIMEOUT_S; torch 2.11's
launcher, which takes no such setting, after its own 30 s): nothing stays.
"""

from __future__ import annotations

import logging
import itertools
import os
import signal
import traceback
import uuid
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import torch

from benchbench.runtime import threads as cpu_threads
from benchbench.errors import BenchError
from benchbench.runtime.rendezvous import Rendezvous
from benchbench.runtime.torchcompat import accepted

# Seconds the launcher waits for the other ranks to stop after one failed, before SIGKILL (where torch's
# launcher takes the setting: 2.13 and 2.14, not 2.11; benchbench.runtime.torchcompat).
SHUTDOWN_TIMEOUT_S = 5
_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
# Multi-node launches made by this process so far: the n-th launch of every node is the same cell (each
# node's launcher runs the same cells in the same order), so n names it alike on all of them.
_NODE_LAUNCHES = itertools.count()


class RankFailure(Exception):
    """A rank raised, died or hung; the message names the rank and its error."""


def init_rank(device_type: str, *, timeout_s: float, threads: int = 1, local: bool = True) -> tuple[torch.device, int, int]:
    """In a rank: its device, the process group (NCCL on CUDA, gloo on the CPU with `threads` threads,
    over loopback when `local`), and (device, rank, world size)."""
    import torch.distributed as dist

    local_rank = int(os.environ["LOCAL_RANK"])
    if device_type == "cuda":
        device, backend = torch.device("cuda", local_rank), "nccl"
        torch.cuda.set_device(device)
    else:
        device, backend = torch.device("cpu"), "gloo"
        cpu_threads.configure(threads, source=f"{threads} per rank", watch=False)  # the ranks share the budget
        cpu_threads.apply()
        if local:
            os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s))
    return device, dist.get_rank(), dist.get_world_size()


def _die_with_launcher(launcher: int) -> None:
    """On Linux: SIGKILL for this rank when its launcher dies. A launcher killed outright (SIGKILL, a
    node going down) cannot stop its ranks; without this they would train on as orphans, then wait for
    the gone launcher forever."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the launcher's own shutdown is all there is
        return
    if os.getppid() != launcher:  # it died before the line above
        os._exit(1)


def _rank_main(folder: str, entry: Callable, args: tuple, launcher: int) -> Any:
    """A rank's process: entry(*args); its error, if any, goes to folder/rank<R>.error first."""
    _die_with_launcher(launcher)
    rank = int(os.environ["RANK"])
    try:
        return entry(*args)
    except BaseException as exc:
        kind = "BenchError" if isinstance(exc, BenchError) else type(exc).__name__
        text = f"{kind}: {exc}".replace("\n", " ")
        (Path(folder) / f"rank{rank}.error").write_text(f"{text}\n{traceback.format_exc()}")
        raise
    finally:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


@contextmanager
def _launcher_quiet() -> Iterator[None]:
    """The launcher logs each start and stop at INFO/WARNING; the caller reports what matters."""
    logger = logging.getLogger("torch.distributed.elastic")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def run_id(rdzv: Rendezvous) -> str:
    """The launch's name in the rendezvous store: random on one node; on several, the same on every
    node (the static rendezvous keys each node's entry by it: a launcher with its own random id waits
    for the others forever), and new for each cell, so a node that comes early never reads the
    previous cell's entries."""
    if rdzv.local:
        return uuid.uuid4().hex
    return f"benchbench-{rdzv.endpoint}-{next(_NODE_LAUNCHES)}"


def launch_config(rdzv: Rendezvous, nproc: int):
    """The elastic launcher's configuration for `nproc` ranks on this node of `rdzv`: no restarts, spawned
    ranks, and SHUTDOWN_TIMEOUT_S where the installed torch's LaunchConfig takes it."""
    from torch.distributed.launcher.api import LaunchConfig

    return LaunchConfig(
        min_nodes=rdzv.nodes, max_nodes=rdzv.nodes, nproc_per_node=nproc, run_id=run_id(rdzv),
        rdzv_backend="c10d" if rdzv.local else "static", rdzv_endpoint=rdzv.endpoint,
        rdzv_configs={} if rdzv.local else {"rank": rdzv.node_rank}, max_restarts=0, monitor_interval=0.1,
        start_method="spawn", local_addr=rdzv.addr if rdzv.local else None,
        **accepted(LaunchConfig, shutdown_timeout=SHUTDOWN_TIMEOUT_S))


def launch(entry: Callable, args: tuple, rdzv: Rendezvous, nproc: int, *, folder: str) -> dict[int, Any]:
    """entry(*args) in `nproc` processes on this node (of `rdzv.nodes`); {global rank: return value}
    of this node's ranks. A failed rank is a RankFailure (a BenchError when the rank's error was one);
    SIGINT/SIGTERM stop the ranks and come back as KeyboardInterrupt. The launcher's signal handlers
    are undone afterwards, so the caller's own (Ctrl-C, SIGTERM: exit 130) hold again."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import elastic_launch

    config = launch_config(rdzv, nproc)
    handlers = {sig: signal.getsignal(sig) for sig in _SIGNALS}
    try:
        with _launcher_quiet():
            return elastic_launch(config, _rank_main)(folder, entry, args, os.getpid())
    except ChildFailedError as exc:
        raise failure(exc.failures, folder, nproc * rdzv.nodes) from None
    except SignalException as exc:
        raise KeyboardInterrupt(f"stopped by {exc.sigval.name}") from None
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


def _rank_error(folder: str, rank: int, exitcode: int) -> tuple[str, str | None]:
    """(one line, traceback or None) of a failed rank: what it wrote before exiting, else how it ended."""
    path = Path(folder) / f"rank{rank}.error"
    if path.is_file():
        line, _, trace = path.read_text().partition("\n")
        return line, trace or None
    if exitcode < 0:
        return f"killed by signal {signal.Signals(-exitcode).name}", None
    return f"exited with status {exitcode} without an error (e.g. os._exit)", None


def failure(failures: Mapping[int, Any], folder: str, world: int) -> Exception:
    """The error from the launcher's failed ranks: the first to fail (the cause; the others mostly
    fail because it did), then the others in one clause."""
    ordered = sorted(failures.items(), key=lambda kv: (kv[1].timestamp, kv[0]))
    first_rank, first = ordered[0]
    line, trace = _rank_error(folder, first_rank, first.exitcode)
    message = f"rank {first_rank} of {world} failed: {line}"
    others = [f"rank {r}: {_rank_error(folder, r, f.exitcode)[0]}" for r, f in ordered[1:]]
    if others:
        message += f" (then {'; '.join(others)})"
    if line.startswith("BenchError: "):  # the user's to fix (_rank_main writes any BenchError so)
        return BenchError(message)
    exc = RankFailure(message)
    if trace:
        exc.add_note(f"rank {first_rank}'s traceback:\n{trace}")
    return exc
