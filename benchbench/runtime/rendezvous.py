"""Where the processes of a data-parallel run meet: this machine alone, or every node of a Slurm job
(or of a launch that sets torchrun's variables), read from the environment."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Mapping

from benchbench.errors import BenchError

LOCAL = "127.0.0.1"
# A Slurm job without MASTER_PORT meets on a port derived from its id, the same on every node.
PORT_BASE, PORT_SPAN = 20_000, 20_000


class LaterNode(Exception):
    """A later node's launcher after its share of a multi-node cell trained: node 0 holds the result
    and records it; this node has nothing to record (not even the trained weights, which rank 0 has)."""


def later_node_note(error: str | None) -> str | None:
    """What a later node said of its cell, from the cell's error ("LaterNode: ...", as the runner
    writes an exception), or None for any other error: that one is a real failure."""
    prefix = f"{LaterNode.__name__}: "
    return error.removeprefix(prefix) if error and error.startswith(prefix) else None


@dataclass(frozen=True)
class Rendezvous:
    """`nodes` launchers, this one `node_rank`, meeting at `addr`:`port` (port 0: any free port, one
    node only)."""

    nodes: int
    node_rank: int
    addr: str
    port: int

    @property
    def endpoint(self) -> str:
        return f"{self.addr}:{self.port}"

    @property
    def local(self) -> bool:
        return self.nodes == 1


def expand_nodelist(text: str) -> list[str]:
    """Slurm's compressed host list ("gpu[01-03,07],login1") as host names, in order."""
    hosts: list[str] = []
    for match in re.finditer(r"([^,\[]+)(?:\[([^\]]*)\])?(?:,|$)", text.strip()):
        prefix, ranges = match.group(1), match.group(2)
        if ranges is None:
            hosts.append(prefix)
            continue
        for part in ranges.split(","):
            low, _, high = part.partition("-")
            if not high:
                hosts.append(prefix + low)
                continue
            if not (low.isdigit() and high.isdigit()) or int(high) < int(low):
                raise BenchError(f"SLURM_JOB_NODELIST={text!r}: cannot read the range {part!r}")
            hosts.extend(f"{prefix}{i:0{len(low)}d}" for i in range(int(low), int(high) + 1))
    if not hosts:
        raise BenchError(f"SLURM_JOB_NODELIST={text!r}: no host names in it")
    return hosts


def records_the_cell(env: Mapping[str, str] | None = None) -> bool:
    """Whether this process records the cells it runs: always, except on the nodes after the first of
    a multi-node launch. A cell on several nodes runs one launcher per node; every node takes part in
    the training, and the first (node 0, where rank 0 lives) alone holds the cell's result. The others
    record nothing, or they would append a record without the result. Which node this is:
    SLURM_PROCID in a Slurm job's tasks (one task per node), else torchrun's NODE_RANK (or GROUP_RANK,
    its name inside torchrun's workers); none of them set: this is the only node."""
    env = os.environ if env is None else env
    for key in ("SLURM_PROCID", "NODE_RANK", "GROUP_RANK"):
        if key in env:
            return _int(env, key) == 0
    return True


def _int(env: Mapping[str, str], key: str) -> int:
    try:
        return int(env[key])
    except ValueError:
        raise BenchError(f"environment variable {key}={env[key]!r}: expected an integer") from None


def rendezvous_from_env(nodes: int, env: Mapping[str, str] | None = None) -> Rendezvous:
    """The rendezvous of a cell with `nodes` = nodes.

    One node: this machine, any free port. More: under Slurm, SLURM_NNODES must equal `nodes`,
    SLURM_NODEID is this node's rank, and the first host of SLURM_JOB_NODELIST (or MASTER_ADDR) at
    MASTER_PORT (or a port derived from SLURM_JOB_ID) the meeting point; outside Slurm, torchrun's
    MASTER_ADDR, MASTER_PORT and NODE_RANK. Anything missing or inconsistent is a BenchError."""
    env = os.environ if env is None else env
    if nodes == 1:
        return Rendezvous(1, 0, LOCAL, 0)
    if "SLURM_NNODES" in env:
        have = _int(env, "SLURM_NNODES")
        if have != nodes:
            raise BenchError(f"nodes = {nodes}, but this Slurm job has {have} (SLURM_NNODES); "
                             f"submit it with --nodes {nodes}")
        listed = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
        addr = env.get("MASTER_ADDR") or (expand_nodelist(listed)[0] if listed else None)
        if addr is None:
            raise BenchError("under Slurm without SLURM_JOB_NODELIST or MASTER_ADDR: no host to meet at")
        if "MASTER_PORT" in env:
            port = _int(env, "MASTER_PORT")
        elif "SLURM_JOB_ID" in env:
            port = PORT_BASE + _int(env, "SLURM_JOB_ID") % PORT_SPAN
        else:
            raise BenchError("under Slurm without SLURM_JOB_ID or MASTER_PORT: no port to meet at")
        return Rendezvous(nodes, _int(env, "SLURM_NODEID"), addr, port)
    missing = [k for k in ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK") if k not in env]
    if missing:
        raise BenchError(f"nodes = {nodes} needs a multi-node launch: run the cell under Slurm (sbatch --nodes "
                         f"{nodes}), or set {', '.join(missing)} on every node")
    rank = _int(env, "NODE_RANK")
    if not 0 <= rank < nodes:
        raise BenchError(f"NODE_RANK={rank}: must be in 0..{nodes - 1} for nodes = {nodes}")
    return Rendezvous(nodes, rank, env["MASTER_ADDR"], _int(env, "MASTER_PORT"))
