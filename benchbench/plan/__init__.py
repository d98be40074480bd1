"""Suites and plans: what a run will do. A suite file parsed and validated (`suite`) with its named
contenders (`contenders`), expanded into `cell`s (model x dataset x protocol x settings, each with a
stable key), the shape a cell's model is built at (`shape`), and each cell's state and cost before
it runs (`preview`: done, failed or to run; FLOPs, expected time), a suite's cells among a run's
records, read through the run's index (`recorded`), and a reference table as the suite that produces its
rows (`from_reference`).

Imports: meters, weights, the store, `runtime` and the contract; never the run layer (which carries
plans out), judging, reporting or the CLI.
"""
