"""The results database: records of runs in SQL (SQLAlchemy Core; SQLite built in, PostgreSQL for a
team), for queries across runs and for history. JSONL stays the source of truth: the database is
filled from it (`ingest`), or alongside it by a run's driver (`live`), and can be rebuilt from it.

Modules: `schema` (the tables and their versions), `migrate` (moving a database to this version, or
refusing a newer one), `connect` (URLs, SQLite's journal mode by filesystem, errors as one line),
`rows` (a record as a row), `ingest` (idempotent loading), `query` (filters), `live` (the driver's
writer for `run --db`), `pathnames` (a name read from a record as one safe folder name for a dump).
docs/results-db.md describes the schema.

Imports: the store, `runtime` and the contract; never judging, reporting, the run layer or above.
"""
