"""The run layer: carrying a plan out. What every cell of a run shares (`context`), one cell in a
worker (`worker`: builds the model and data, runs the protocol and the meters, writes the record),
many cells on an executor (`dispatch`), each cell in a process of its own (`isolated`, with the
modules a forked cell starts from: `preload`). Imports go one way: dispatch -> worker -> context.

Imports: plans, meters, weights, the store, `runtime` and the contract; never judging, reporting,
the database, the site or the CLI.
"""
