"""A suite's cells in a run directory that may hold many records of other cells (a sweep's other seeds):
their states (which are done, for a plan) and their last records (for the run's table), from the run's
index entries (`benchbench.store.rundir.read_keys`).

A cell's key hashes its model, dataset, protocol and seed with its settings, so a record of none of
the suite's cells' (model, dataset, protocol, seed) is of none of its cells however today's protocols
key it (`key_today`): it is passed over without reading its line. A run of 50,000 records of other
seeds plans a one-cell suite, and tables it, at the cost of reading its index.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Container, Iterable, Sequence

from benchbench.plan.cell import Cell, key_today
from benchbench.plan.preview import cell_states
from benchbench.plugins import Catalog
from benchbench.store.index import Entry
from benchbench.store.record import Record
from benchbench.store.rundir import Keys


def suite_states(keys: Keys, catalog: Catalog, cells: Sequence[Cell]) -> dict[str, str]:
    """{key of one of `cells`: "done" | "failed"} of the run read as `keys`, as `cell_states` gives them
    from all its records: the last record of a cell wins, a record keyed as one of `cells` is that cell's
    unread, and only a record of one's model, dataset, protocol and seed under another key is read (for
    its `key_today`)."""
    wanted = {c.key for c in cells}
    states = cell_states(_may_be(keys.entries, cells, wanted), catalog, wanted, keys.records)
    return {key: state for key, state in states.items() if key in wanted}


def suite_records(keys: Keys, catalog: Catalog, cells: Sequence[Cell]) -> list[Record]:
    """The last record of each of `cells` in the run read as `keys`, keyed as today's protocols key it
    (`key_today`), in the order of `cells`: the rows that `benchbench.store.results.load(run, cell_key=...)`
    with key_today holds of those cells, reading only the records that may be theirs."""
    order = {c.key: i for i, c in enumerate(cells)}
    last: dict[str, Record] = {}
    for record in keys.records(_may_be(keys.entries, cells, order)):
        if record is not None and (key := key_today(record, catalog)) in order:
            last[key] = record if record.key == key else replace(record, key=key)
    return sorted(last.values(), key=lambda r: order[r.key])


def _may_be(entries: Iterable[Entry], cells: Sequence[Cell], keys: Container[str]) -> list[Entry]:
    """The entries, in order, that may be records of `cells` (whose keys are `keys`): keyed as one, or of
    one's model, dataset, protocol and seed (key_today may key it as that cell). A record of a protocol
    the catalog lacks keeps its own key, hence the first test."""
    same = {(c.model, c.dataset, c.protocol, c.seed) for c in cells}
    return [e for e in entries if e.key in keys or (e.model, e.dataset, e.protocol, e.seed) in same]
