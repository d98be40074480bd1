"""The copy-bandwidth probe (benchbench.meters.bandwidth) and `benchbench device`'s measured figures: the
bandwidth against numpy's copy timed beside it, --describe's entry read back by the --devices reader, its
memory against /proc/meminfo."""

import json
import tomllib

import numpy as np
import pytest
import torch

from benchbench.cli import main


def test_the_copy_bandwidth_is_numpys_copy_within_a_factor_of_four():
    """Two tools, one run: torch's copy of a 64 MiB buffer and numpy's of the same size, each the best of 10,
    count 2 bytes per byte copied; on one CPU they agree within 4x (torch may use more threads)."""
    from benchbench.meters.bandwidth import measured_copy_bytes_per_s

    nbytes = 64 << 20
    ours = measured_copy_bytes_per_s("cpu", nbytes)
    a = np.ones(nbytes // 4, np.float32)
    b = np.empty_like(a)
    import time

    best = float("inf")
    for i in range(13):
        start = time.perf_counter()
        np.copyto(b, a)
        if i >= 3:
            best = min(best, time.perf_counter() - start)
    assert 0.25 < ours / (2 * a.nbytes / best) < 4


def test_a_copy_smaller_than_a_mib_is_refused():
    from benchbench.meters.bandwidth import measured_copy_bytes_per_s

    with pytest.raises(ValueError, match="measures the cache"):
        measured_copy_bytes_per_s("cpu", 4096)


def test_device_prints_the_measured_copy_beside_the_matmul(capsys):
    assert main(["device", "--device", "cpu", "--matmul-n", "64", "--copy-mib", "8", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["mem_bw_gb_per_s_measured"] > 0 and row["mem_bw_gb_per_s_table"] is None  # a CPU: no table entry
    assert main(["device", "--device", "cpu", "--matmul-n", "64", "--copy-mib", "8"]) == 0
    assert "measured copy   " in capsys.readouterr().out
    assert main(["device", "--device", "cpu", "--copy-mib", "0"]) == 2
    err = capsys.readouterr().err
    assert "--copy-mib 0: give at least 1 (MiB)" in err and "Traceback" not in err and len(err.splitlines()) == 1
    assert main(["device", "--device", "cpu", "--copy-mib", str(1 << 27)]) == 2  # 2 x 128 TiB: never fits
    err = capsys.readouterr().err
    assert f"two buffers of {1 << 27} MiB do not fit on cpu; give a smaller --copy-mib" in err and len(err.splitlines()) == 1


def test_describe_writes_an_entry_the_devices_reader_reads_back(capsys, tmp_path):
    """`device --describe ID` prints a [devices.ID] table of what it measured: the --devices reader takes it as
    it is; its name is the device's as torch reports it (what a run records, so a run measured here projects
    from it), its memory the machine's (/proc/meminfo's MemTotal, a second source), its units the threads."""
    from benchbench.projection.catalog import MEASURED, read_devices
    from benchbench.runtime.envinfo import device_name

    assert main(["device", "--device", "cpu", "--describe", "this-cpu", "--matmul-n", "64", "--copy-mib", "8"]) == 0
    text = capsys.readouterr().out
    (tmp_path / "devices.toml").write_text(text)
    (device,) = read_devices(tmp_path / "devices.toml").values()
    printed = tomllib.loads(text)["devices"]["this-cpu"]
    assert (device.id, device.name, device.sms) == ("this-cpu", device_name(torch.device("cpu")), torch.get_num_threads())
    assert device.source.startswith(MEASURED) and "not a datasheet's" in device.source
    assert set(device.tensor_flops_per_s) == {"bf16"}  # a CPU computes no fp16 (precision.resolve refuses it)
    assert device.tensor_flops_per_s["bf16"] == printed["bf16_tflops"] * 1e12 > 0
    assert device.mem_bw_bytes_per_s == printed["mem_bw_gb_per_s"] * 1e9 > 0
    kib = next(int(line.split()[1]) for line in open("/proc/meminfo") if line.startswith("MemTotal:"))
    assert device.memory_gib == pytest.approx(kib * 1024 / 1e9, rel=1e-4)


@pytest.mark.parametrize("device_id", ["h100", "rtx-4090", "tpu-v3"])
def test_a_catalog_device_written_as_an_entry_reads_back_as_its_datasheet_figures(tmp_path, device_id):
    from benchbench.projection.catalog import builtin, device_toml, read_devices

    device = builtin()[device_id]
    (tmp_path / "d.toml").write_text(device_toml(device))
    back = read_devices(tmp_path / "d.toml")[device_id]
    assert (back.name, back.source, back.sms, back.memory_gib) == (device.name, device.source, device.sms,
                                                                   device.memory_gib)
    assert back.tensor_flops_per_s == pytest.approx(device.tensor_flops_per_s, rel=1e-6)
    assert back.mem_bw_bytes_per_s == pytest.approx(device.mem_bw_bytes_per_s, rel=1e-6)
    assert back.fp32_flops_per_s == (device.fp32_flops_per_s and pytest.approx(device.fp32_flops_per_s, rel=1e-6))


def test_describe_warns_where_the_table_knows_the_device_and_refuses_bad_ids(capsys, monkeypatch):
    """A device the datasheet table knows gets a comment first: the entry would replace the table's figures for
    its measurements (results/projection/README.md's H100 check); an id `--to` could not name, or --json, is
    refused in one line."""
    import benchbench.runtime.envinfo as envinfo

    monkeypatch.setattr(envinfo, "device_name", lambda device: "NVIDIA H100 80GB HBM3")
    assert main(["device", "--device", "cpu", "--describe", "h100-here", "--matmul-n", "64", "--copy-mib", "8"]) == 0
    comment, *entry = capsys.readouterr().out.splitlines()
    assert comment.startswith("# The datasheet table knows this device (NVIDIA H100 SXM)") and "1.0-3.8 points" in comment
    assert entry[:2] == ['[devices."h100-here"]', 'name = "NVIDIA H100 80GB HBM3"']
    for argv, words in ((["--describe", "My GPU"], "--describe 'My GPU': an id is lower-case letters"),
                        (["--describe", "x", "--json"], "--describe prints a --devices entry (TOML), not JSON")):
        assert main(["device", "--device", "cpu", *argv]) == 2
        err = capsys.readouterr().err
        assert words in err and len(err.splitlines()) == 1
