"""The run layer: one cell (`cell`, `worker`), the run's context (`context`), many cells on an
executor (`dispatch`). Imports go one way: dispatch -> worker -> cell, context."""
