"""Judging: where a verdict is decided. The one rule for a metric's direction, noise and verdict
(`rule`), interval statistics (`stats`), paired tests on the same test images (`paired`), run
against run and contender against contender (`compare`, `versus`), a metric's history across runs
(`history`) and the change points in it (`changepoints`), the accuracy/compute frontier
(`frontier`), and published references with the verdicts on a run against them (`reference`,
`verify`; a projected figure's cells projected by `projected`).

Imports: the store, the contract and the projection (a projected figure's interval); never the run layer,
reporting, the database, the site or the CLI.
"""
