"""The store: where a record is written and read back. A typed frozen `record` and the values it may
hold (`values`), the run directory with its lock and append-only records.jsonl (`rundir`), the same
under many writers with the jobs' journal (`shared`), the on-disk index of a run's keys (`index`) and
the timings it keeps (`timing`), per-image predictions beside the records (`predictions`), records as
a pandas DataFrame (`results`), who a record belongs to (`contender`), and atomic file writes
(`atomic`).

Imports: the contract (`specs`, `settings`, `plugins`, `errors`, `text`, `choices`), `archives` and
`runtime`; never meters, weights, plans, the run layer, judging or reporting.
"""
