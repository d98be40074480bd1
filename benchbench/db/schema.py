"""The tables of the results database, and the version of this layout.

`records`: one row per record. A record's identity is (suite, run_id, key, job): the run, the cell's
key, and the attempt, which is the scheduler's job id where the record has one, else
"start:<started_at>" (a failed cell and its retry on resume are two records of the same key without a
job id, started at different times), else "line:<n>", its place among its run's records of that key
with neither (benchbench.db.rows.attempts): an edited line keeps its identity, and an ingest replaces
its row. The typed columns
follow the record's own field and metric names (units in the names); `settings`, `env` and `metrics`
are the record's own, whole, as JSON, and `record` is the rest of its JSON line: `record` with those
three put back is the line exactly (benchbench.db.rows.row_record), from which every other column is
derived.
`schema_version`: one row, the layout's version (`VERSION`).
"""

from __future__ import annotations

from sqlalchemy import (JSON, BigInteger, Boolean, Column, DateTime, Float, Index, Integer, MetaData, String, Table,
                        Text, UniqueConstraint)

VERSION = 4  # the layout this code writes; the history of versions is benchbench.db.migrate.MIGRATIONS

metadata = MetaData()

schema_version = Table(
    "schema_version", metadata,
    Column("version", Integer, primary_key=True, autoincrement=False),
)

# (column name, SQL type, where the value comes from): the typed columns of `records`
METRIC_COLUMNS = {
    "top1": Float, "top5": Float, "params": BigInteger, "gmacs": Float,
    "img_per_s": Float,  # evaluation (inference) throughput, as the record's metric `img_per_s`
    "train_img_per_s": Float,  # training throughput
    "train_device_days": Float, "projected_device_days": Float,
    # version 3's
    "gmacs_fvcore": Float,  # MACs in fvcore's (timm's) convention
    "energy_train_j": Float, "energy_eval_j": Float, "cost_usd": Float,
    # version 4's
    "gmacs_xla": Float,  # MACs in XLA's convention (the ViT paper's Table 6)
}
# The columns version 4 added: what a record of schema 5 says its numerics depend on (NULL before).
V4_COLUMNS = ("gmacs_xla", "cpu_capability", "suite_sha256")
# The columns version 3 added (its migration adds them to an older table; `contender` is filled there).
V3_COLUMNS = ("contender", "gmacs_fvcore", "energy_train_j", "energy_eval_j", "cost_usd")

records = Table(
    "records", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("suite", String(200), nullable=False, default=""),
    Column("run_id", String(200), nullable=False),
    Column("key", String(64), nullable=False),
    Column("job", String(300), nullable=False),
    Column("model", String(300), nullable=False),
    Column("contender", String(300)),  # the record's `contender` (its default name for older records)
    Column("family", String(100)),
    Column("dataset", String(300), nullable=False),
    Column("protocol", String(100), nullable=False),
    Column("seed", BigInteger, nullable=False),
    Column("status", String(16), nullable=False),
    *(Column(name, kind) for name, kind in METRIC_COLUMNS.items()),
    Column("device", String(100)),
    Column("device_name", String(300)),
    Column("devices", Integer),
    Column("precision", String(32)),
    Column("execution", JSON),
    Column("git_commit", String(100)),
    Column("torch_version", String(100)),  # torch's full version (record schema 5's env.numerics.torch)
    Column("cpu_capability", String(32)),  # the CPU instruction set torch chose kernels for ("AVX2", ...)
    Column("suite_sha256", String(64)),  # the suite file's hash
    Column("started_at", DateTime(timezone=True)),
    Column("finished_at", DateTime(timezone=True)),
    Column("wall_seconds", Float),
    Column("error", Text),
    Column("quick", Boolean),
    Column("executor", String(100)),
    Column("node", String(300)),
    Column("job_id", String(300)),
    Column("run_dir", Text),
    Column("settings", JSON, nullable=False),
    Column("env", JSON),
    Column("metrics", JSON, nullable=False),
    Column("record", JSON, nullable=False),
    UniqueConstraint("suite", "run_id", "key", "job", name="records_identity"),
)

# Version 2's addition: the lookup every history and most queries start from.
history_index = Index("records_cell", records.c.model, records.c.dataset, records.c.protocol, records.c.key)
