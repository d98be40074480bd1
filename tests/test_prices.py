"""Cost per cell (issue 36): prices the user gives (--price, a suite's [[cost]]), matched to a cell's
device; cost_usd = wall hours x devices x price, recorded with the price; a projected schedule's cost,
labelled projected; bad prices and unknown device names refused in one line; where the tables show it."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace

import pytest

from benchbench.errors import BenchError
from benchbench.meters.prices import Price, check_devices, from_cli, from_suite, price_for, priced

H100 = "NVIDIA H100 80GB HBM3"


@pytest.mark.parametrize("given, message", [
    ("H100=-1", "--price 'H100=-1': expected a positive number of US dollars per device-hour, e.g. --price H100=2.49"),
    ("H100=0", "--price 'H100=0': expected a positive number"),
    ("H100=cheap", "--price 'H100=cheap': expected a positive number"),
    ("H100=nan", "--price 'H100=nan': expected a positive number"),
    ("H100", "--price 'H100': write DEVICE=USD_PER_HOUR, e.g. --price H100=2.49 or --price cpu=0.05"),
    ("=2", "--price '=2': write DEVICE=USD_PER_HOUR"),
])
def test_a_bad_price_on_the_command_line_is_one_line_naming_it(given, message):
    with pytest.raises(BenchError) as err:
        from_cli([given])
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


@pytest.mark.parametrize("entry, message", [
    ({"device": "H100", "usd_per_hour": -2.0}, "s.toml: [[cost]] #1.usd_per_hour = -2.0: expected a positive number"),
    ({"device": "H100", "usd_per_hour": 0}, "s.toml: [[cost]] #1.usd_per_hour = 0: expected a positive number"),
    ({"device": "H100", "usd_per_hour": "2.49$"}, "s.toml: [[cost]] #1.usd_per_hour = '2.49$': expected a positive"),
    ({"device": "H100", "usd_per_hour": True}, "s.toml: [[cost]] #1.usd_per_hour = True: expected a positive"),
    ({"device": "H100"}, "s.toml: [[cost]] #1.usd_per_hour: missing"),
    ({"device": "H100", "usd_per_hr": 2.0}, "s.toml: [[cost]] #1: unknown key 'usd_per_hr'; did you mean 'usd_per_hour'?"),
    ({"usd_per_hour": 2.0}, "s.toml: [[cost]] #1.device: expected a device name"),
])
def test_a_bad_cost_entry_is_one_line_naming_the_key(entry, message):
    with pytest.raises(BenchError) as err:
        from_suite([entry], "s.toml")
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_an_unknown_device_name_is_refused_with_the_nearest():
    with pytest.raises(BenchError) as err:
        check_devices(from_suite([{"device": "H10O", "usd_per_hour": 2.0}], "s.toml"), here=["AMD EPYC (2 threads)"])
    assert str(err.value).startswith("s.toml [[cost]] #1.device: unknown device 'H10O'; did you mean 'H100'?")
    check_devices(from_suite([{"device": "h100", "usd_per_hour": 2.0}, {"device": "CUDA", "usd_per_hour": 1.0},
                              {"device": "epyc", "usd_per_hour": 0.1}], "s.toml"), here=["AMD EPYC (2 threads)"])
    with pytest.raises(BenchError, match=r"^--price: unknown device 'B300'"):
        check_devices(from_cli(["B300=9"]))


def test_a_name_beats_a_kind_and_the_command_line_beats_the_suite():
    prices = [Price("cuda", 1.0, given_by="--price"), Price("H100", 2.0, given_by="--price"),
              Price("h100", 3.0, given_by="suite"), Price("cpu", 0.1, given_by="suite")]
    assert price_for(prices, "cuda:0", H100).usd_per_hour == 2.0
    assert price_for(prices, "cuda:1", "NVIDIA A100-SXM4-80GB").usd_per_hour == 1.0
    assert price_for(prices, "cpu", "AMD EPYC (2 threads)").usd_per_hour == 0.1
    assert price_for(prices[:3], "cpu", "AMD EPYC (2 threads)") is None


def test_a_cells_cost_is_wall_hours_times_devices_times_the_price(make_record):
    record = replace(make_record("vit-b16", device="cuda:0", projected_device_days=0.5), wall_seconds=5_400.0,
                     devices=4)
    out = priced(record, [Price("H100", 2.5, "provider list, 2026-11", "s.toml [[cost]] #1")], H100)
    assert out.metrics["cost_usd"] == pytest.approx(1.5 * 4 * 2.5)  # 1.5 h on 4 devices at $2.50
    assert out.metrics["projected_cost_usd"] == pytest.approx(0.5 * 24 * 2.5)  # a projection: days x 24 h x price
    assert out.price == {"device": "H100", "usd_per_hour": 2.5, "source": "provider list, 2026-11",
                         "given_by": "s.toml [[cost]] #1"}
    unpriced = priced(record, [Price("A100", 1.0)], H100)
    assert "cost_usd" not in unpriced.metrics and unpriced.price == {
        "unpriced": "no price for 'NVIDIA H100 80GB HBM3': give one with --price DEVICE=USD_PER_HOUR or a [[cost]] "
                    "entry in the suite"}
    assert priced(record, [], H100) is record  # no price given: nothing said


MEASURE = """
    [suite]
    name = "m"
    models = ["vit-mu7"]
    datasets = ["fashion-mnist"]
    protocols = ["measure"]
"""


def test_a_run_records_each_cells_cost_at_the_given_price(run_suite, capsys):
    run_suite.write(MEASURE + """
    [[cost]]
    device = "cpu"
    usd_per_hour = 0.25
    source = "a cloud's on-demand vCPU price"
    """)
    assert run_suite.run("--price", "cpu=3.6") == 0  # the command line's price first
    (record,) = run_suite.records()
    assert record.metrics["cost_usd"] == pytest.approx(record.wall_seconds / 3600 * record.devices * 3.6)
    assert record.price == {"device": "cpu", "usd_per_hour": 3.6, "source": "--price", "given_by": "--price"}
    assert f"${record.metrics['cost_usd']:.3g}" in capsys.readouterr().err  # the cell's summary line says it
    table = run_suite.cli("table", run_suite.run_dir, "--layout", "compute", "--format", "json")
    assert table.returncode == 0, table.stderr
    (row,) = json.loads(table.stdout)
    assert row["cost_usd"] == pytest.approx(record.metrics["cost_usd"])
    text = run_suite.cli("table", run_suite.run_dir, "--layout", "compute").stdout
    assert "Cost (USD)" in text and "Energy (kJ)" not in text  # no counter here: no energy column
    # the database's columns (benchbench.db.schema): the cost, and no joules where none were read
    db = run_suite.dir / "r.db"
    ingest = run_suite.cli("db", "ingest", run_suite.run_dir, "--db", f"sqlite:///{db}")
    assert ingest.returncode == 0, ingest.stderr
    with sqlite3.connect(db) as con:
        (cost, joules), = con.execute("SELECT cost_usd, energy_train_j FROM records").fetchall()
    assert cost == pytest.approx(record.metrics["cost_usd"]) and joules is None


@pytest.mark.parametrize("extra, suite_cost, message", [
    (["--price", "cpu=-1"], "", "--price 'cpu=-1': expected a positive number of US dollars per device-hour"),
    ([], '[[cost]]\ndevice = "Xeon Phi 9000"\nusd_per_hour = 1\n', "[[cost]] #1.device: unknown device 'Xeon Phi 9000'"),
    ([], '[[cost]]\ndevice = "cpu"\nusd_per_hour = "free"\n', "[[cost]] #1.usd_per_hour = 'free': expected a positive"),
])
def test_bad_prices_stop_a_run_before_anything_is_written(run_suite, capsys, extra, suite_cost, message):
    run_suite.write(MEASURE + suite_cost)
    assert run_suite.run(*extra) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not run_suite.results.exists()


def test_tables_show_energy_and_cost_beside_device_days_and_a_dash_without(make_record):
    import pandas as pd

    from benchbench.store.results import frame
    from benchbench.report.tables import build_table

    records = [make_record("vit-b16", "jft-300m", "measure", projected_device_days=2.0, energy_train_j=1_500.0,
                           energy_eval_j=500.0, cost_usd=0.25, projected_cost_usd=120.0),
               make_record("bit-r50x1", "jft-300m", "measure", projected_device_days=3.0)]
    table = build_table(frame(records), "compute")
    headers = table.headers
    assert headers[-3:] == ["Energy (kJ)", "Cost (USD)", "Projected cost (USD, projected)"]
    assert table.rows[0][-3:] == ["2", "0.25", "120"] and table.rows[1][-3:] == ["-", "-", "-"]
    assert headers[headers.index("Energy (kJ)") - 1].startswith("Projected device-days")
    assert list(table.data["energy_kj"])[0] == 2.0 and pd.isna(list(table.data["energy_kj"])[1])
    scaling = build_table(frame(records), "paper-scaling")
    assert scaling.headers[-3:] == ["Energy (kJ)", "Cost (USD)", "Projected cost (USD, projected)"]
    plain = build_table(frame([make_record("vit-b16", "jft-300m", "measure", projected_device_days=2.0)]), "compute")
    assert "Cost (USD)" not in plain.headers  # nothing priced or measured: the table as before


@pytest.mark.slow  # ~10 s: the slow step runs it (default tests stay under 4 min on 2 cores)
def test_cost_projects_the_cost_of_its_projected_device_days(run_suite):
    out = run_suite.cli("cost", "vit-mu4", "--images", "1000", "--epochs", "1", "--device", "cpu", "--precision",
                        "fp32", "--batch-size", "8", "--price", "cpu=2.0", "--json")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["projected_cost_usd"] == pytest.approx(got["projected_device_days"] * 24 * 2.0)
    assert got["price"]["usd_per_hour"] == 2.0
    refused = run_suite.cli("cost", "vit-mu4", "--images", "1000", "--epochs", "1", "--price", "cpu=2.0")
    assert refused.returncode == 2 and "--price prices the projected device-days" in refused.stderr
