"""One cell on two nodes, for real on one machine: two `benchbench run` launchers meet as torchrun's
nodes do (MASTER_ADDR, MASTER_PORT, NODE_RANK), each starting one gloo rank on the CPU.

The independent source is the same cell on one node: with devices = 1 on 2 nodes the final weights
equal those of devices = 1 on 1 node and of devices = 2 on 1 node (float64: to 1e-12), and node 0's
single record carries the same metrics. A node that dies (its launcher SIGKILLed) fails node 0's cell
and leaves no process behind. The Slurm job on two nodes is in tests/test_cluster.py."""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

# The float64 ViT, the cell and the process and weight helpers of the single-node tests: the `ranks`
# fixture (tests/conftest.py); every process started here carries the mark `ranks.leftovers` finds.
pytestmark = pytest.mark.usefixtures("mark_processes")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _nodes_env(port: int, rank: int) -> dict[str, str]:
    return {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "NODE_RANK": str(rank)}


def _start_node(run_suite, port: int, rank: int, suite: Path) -> subprocess.Popen:
    """Node `rank`'s launcher: `benchbench run` with torchrun's variables and results of its own (as on
    a machine of its own), in a session of its own."""
    argv = [str(run_suite.exe), *run_suite.argv("--results", str(run_suite.dir / f"node{rank}"), suite=suite)]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=run_suite.env(_nodes_env(port, rank)), start_new_session=True)


def _one_run_dir(root: Path) -> Path:
    (run_dir,) = [p for p in root.glob("*/*") if p.is_dir()]
    return run_dir


# --- which node records, and the launch's name: no processes ---------------------------------------


def test_only_the_first_node_records_the_cell():
    from benchbench.errors import BenchError
    from benchbench.runtime.rendezvous import records_the_cell

    assert records_the_cell({})
    assert records_the_cell({"SLURM_PROCID": "0"}) and not records_the_cell({"SLURM_PROCID": "1"})
    assert records_the_cell({"NODE_RANK": "0", "MASTER_ADDR": "h"}) and not records_the_cell({"NODE_RANK": "1"})
    assert not records_the_cell({"GROUP_RANK": "2"})
    # Slurm's task rank first: a job's first task records even where NODE_RANK says otherwise
    assert records_the_cell({"SLURM_PROCID": "0", "NODE_RANK": "1"})
    with pytest.raises(BenchError, match="NODE_RANK='one': expected an integer"):
        records_the_cell({"NODE_RANK": "one"})


def test_a_launch_on_many_nodes_has_a_name_every_node_gives_it():
    from benchbench.runtime.launch import run_id
    from benchbench.runtime.rendezvous import Rendezvous

    two = Rendezvous(2, 0, "10.0.0.1", 29500)
    first, second = run_id(two), run_id(Rendezvous(2, 1, "10.0.0.1", 29500))
    # n-th multi-node launch of a process: the same on node 0 and node 1 (each counts its own), new per cell
    assert first.startswith("benchbench-10.0.0.1:29500-") and second.startswith("benchbench-10.0.0.1:29500-")
    assert int(second.rsplit("-", 1)[1]) == int(first.rsplit("-", 1)[1]) + 1
    one = Rendezvous(1, 0, "127.0.0.1", 0)
    assert run_id(one) != run_id(one)  # one node: a fresh random name


# --- two launchers, one machine ----------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.expected(seconds=72)  # CI, 2 cores (.ci/run starts the longest first)
def test_two_nodes_train_the_weights_one_node_trains_and_node_0_alone_records(run_suite, ranks):
    run_suite.plugin(ranks.PLUGIN, "f64.py")
    cells = {}
    for name, devices, nodes in (("one", 1, 1), ("two", 2, 1)):
        run_suite.write(ranks.SUITE.format(name=name, model="vit-f64", devices=devices, extra=f"nodes = {nodes}"),
                        f"{name}.toml")
        assert run_suite.run("--results", str(run_suite.dir / name)) == 0
        run_dir = _one_run_dir(run_suite.dir / name)
        (record,) = run_suite.records(run_dir)
        cells[name] = record, run_dir
    suite = run_suite.write(ranks.SUITE.format(name="nodes", model="vit-f64", devices=1, extra="nodes = 2"), "nodes.toml")
    port = free_port()
    nodes = [_start_node(run_suite, port, rank, suite) for rank in (0, 1)]
    outs = [node.communicate(timeout=900) for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], outs
    assert "ran 1 cell as a later node of a multi-node launch: node 0 records them" in outs[1][1]
    assert "trained its share; node 0 records the cell" in "".join(outs[1]) and "FAILED" not in "".join(outs[1])

    run_dir = _one_run_dir(run_suite.dir / "node0")
    (record,) = run_suite.records(run_dir)  # exactly one record, node 0's
    assert not (_one_run_dir(run_suite.dir / "node1") / "records.jsonl").exists()
    assert not list(_one_run_dir(run_suite.dir / "node1").glob("checkpoints/*"))  # node 1 has no weights
    assert record.ok, record.error
    for name, (other, other_dir) in cells.items():
        assert ranks.max_diff(ranks.weights(other_dir), ranks.weights(run_dir)) < 1e-12, name
        for key in ranks.SAME_METRICS:
            assert other.metrics[key] == record.metrics[key], (name, key)
    assert record.devices == 2 and record.metrics["devices"] == 2
    assert record.settings["nodes"] == 2 and record.key != cells["two"][0].key  # what ran is in the key
    assert ranks.leftovers() == []


@pytest.mark.slow
def test_a_node_that_dies_fails_node_0s_cell_and_leaves_no_process(run_suite, ranks):
    """Node 1's launcher is SIGKILLed while its rank trains (as when its machine goes down): its rank
    follows it (PR_SET_PDEATHSIG), and node 0's rank fails in the gradients' all-reduce, either at once
    (gloo sees the peer's socket close or reset: seen on an idle machine and in CI) or at the collective timeout (seen
    under load), and node 0 records the cell as failed with that error."""
    run_suite.plugin(ranks.PLUGIN, "f64.py")
    suite = run_suite.write(ranks.SUITE.format(name="dies", model="vit-f64", devices=1,
                                               extra="nodes = 2\ntimeout_s = 20").replace("epochs = 1", "epochs = 1000"),
                            "dies.toml")
    port = free_port()
    node0, node1 = (_start_node(run_suite, port, rank, suite) for rank in (0, 1))
    spawned = lambda: [pid for pid, cmd in ranks.leftovers() if "multiprocessing.spawn" in cmd]  # noqa: E731
    deadline = time.monotonic() + 300
    while len(spawned()) < 2:
        assert node0.poll() is None and node1.poll() is None and time.monotonic() < deadline
        time.sleep(0.5)
    time.sleep(3)  # both ranks are training
    node1.send_signal(signal.SIGKILL)
    node1.communicate()
    killed = time.monotonic()
    out, err = node0.communicate(timeout=300)
    waited = time.monotonic() - killed
    assert node0.returncode == 1, err
    (record,) = run_suite.records(_one_run_dir(run_suite.dir / "node0"))
    assert record.status == "failed" and record.error.startswith("RankFailure: rank 0 of 2 failed: "), record.error
    # gloo words the peer's socket closing either way ("closed by peer" or, mid-read, "reset by peer")
    assert any(why in record.error.lower() for why in ("timed out", "timeout", "connection closed by peer",
                                                       "connection reset by peer")), record.error
    assert waited < 20 + 60, waited  # at most the timeout, then the launcher's stop (a loaded machine: slow)
    deadline = time.monotonic() + 30
    while ranks.leftovers() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert ranks.leftovers() == []
