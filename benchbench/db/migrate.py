"""Moving a results database to this code's layout (`schema.VERSION`), or refusing a newer one.

The migrations are a short hand-written list, not alembic: the layout is two tables, the steps are a
few statements each, they must run inside `ingest` and `run --db` without a separate tool or its
configuration, and the list is the documented history of versions (docs/results-db.md). Each step
runs in the transaction that checks the version, under the database's write lock (SQLite: BEGIN
IMMEDIATE; PostgreSQL: an advisory lock), so concurrent writers migrate once.
"""

from __future__ import annotations

from typing import Callable

from sqlalchemy import Connection, bindparam, inspect, select, text
from sqlalchemy.schema import CreateTable

from benchbench.store.contender import default_name
from benchbench.db import schema
from benchbench.errors import BenchError


class SchemaError(BenchError):
    """A database of another layout than this code can use."""


def _v1(conn: Connection) -> None:
    """The `records` table and `schema_version`."""
    conn.execute(CreateTable(schema.schema_version, if_not_exists=True))
    conn.execute(CreateTable(schema.records, if_not_exists=True))


def _v2(conn: Connection) -> None:
    """An index on (model, dataset, protocol, key): history and query lookups."""
    schema.history_index.create(conn, checkfirst=True)


def _add_columns(conn: Connection, names: tuple[str, ...]) -> set[str]:
    """Adds each of `names` (the table's columns of that name) that `records` lacks; the columns it had."""
    have = {c["name"] for c in inspect(conn).get_columns("records")}
    for name in names:
        if name not in have:
            column = schema.records.c[name]
            conn.execute(text(f"ALTER TABLE records ADD COLUMN {name} {column.type.compile(dialect=conn.dialect)}"))
    return have


def _v3(conn: Connection) -> None:
    """Columns `contender` (filled from each row's record: its own name, or its default one), and the
    metrics `gmacs_fvcore`, `energy_train_j`, `energy_eval_j` and `cost_usd` (NULL: no record before
    version 3 measured them). A table `_v1` made at this version has them already."""
    have = _add_columns(conn, schema.V3_COLUMNS)
    if "contender" in have:
        return
    table = schema.records
    rows = conn.execute(select(table.c.id, table.c.model, table.c.settings, table.c.record)).all()
    names = [{"row": row_id, "name": (rest or {}).get("contender") if isinstance(rest, dict) else None}
             for row_id, _, _, rest in rows]
    for item, (_, model, settings, _) in zip(names, rows):
        if not isinstance(item["name"], str):
            item["name"] = default_name(model, settings if isinstance(settings, dict) else {})
    if names:
        conn.execute(table.update().where(table.c.id == bindparam("row")).values(contender=bindparam("name")), names)


def _v4(conn: Connection) -> None:
    """Columns `gmacs_xla` (NULL: no record before it counted XLA's MACs), `cpu_capability` and
    `suite_sha256`, filled from each row's `env` (records of schema 5 carry them; older ones leave them
    NULL), and `torch_version` becomes torch's full version where the record has it (`2.14.1+cu130`). A table `_v1` made at this version has the columns already."""
    _add_columns(conn, schema.V4_COLUMNS)
    table = schema.records
    updates = []
    for row_id, env, torch_version in conn.execute(select(table.c.id, table.c.env, table.c.torch_version)).all():
        numerics = env.get("numerics") if isinstance(env, dict) else None
        if not isinstance(numerics, dict):
            continue
        updates.append({"row": row_id, "cap": _short(numerics.get("cpu_capability"), 32),
                        "sha": _short(env.get("suite_sha256"), 64), "torch": _short(numerics.get("torch"), 100) or torch_version})
    if updates:
        conn.execute(table.update().where(table.c.id == bindparam("row")).values(
            cpu_capability=bindparam("cap"), suite_sha256=bindparam("sha"), torch_version=bindparam("torch")), updates)


def _short(value: object, limit: int) -> str | None:
    return value if isinstance(value, str) and len(value) <= limit else None


# version -> the step that makes a database of version - 1 that version (0: an empty database)
MIGRATIONS: dict[int, Callable[[Connection], None]] = {1: _v1, 2: _v2, 3: _v3, 4: _v4}
assert max(MIGRATIONS) == schema.VERSION
PG_LOCK = 0x62656E6368  # the advisory lock key of benchbench's migrations on PostgreSQL


def version_of(conn: Connection) -> int:
    """The database's layout version; 0 for a database without benchbench's tables."""
    tables = set(inspect(conn).get_table_names())
    if "schema_version" not in tables:
        if "records" in tables:
            raise SchemaError("the database has a `records` table but no `schema_version`: it is not a "
                              "benchbench results database; name another database")
        return 0
    found = conn.execute(select(schema.schema_version.c.version)).scalars().all()
    if len(found) != 1:
        raise SchemaError(f"the database's schema_version table holds {len(found)} rows, not 1; it is not a "
                          "benchbench results database as this code wrote it")
    return int(found[0])


def refuse_newer(version: int, where: str) -> None:
    if version > schema.VERSION:
        raise SchemaError(f"{where}: results database schema {version} is newer than this benchbench's "
                          f"({schema.VERSION}); upgrade benchbench to use it (nothing was changed)")


def migrate(conn: Connection, where: str) -> int:
    """Bring the database to `schema.VERSION` inside the caller's (write-locked) transaction; returns the
    version it had. A newer one is refused, untouched."""
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": PG_LOCK})
    version = version_of(conn)
    refuse_newer(version, where)
    for step in range(version + 1, schema.VERSION + 1):
        MIGRATIONS[step](conn)
    if version < schema.VERSION:
        conn.execute(schema.schema_version.delete())
        conn.execute(schema.schema_version.insert().values(version=schema.VERSION))
    return version
