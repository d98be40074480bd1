"""`python -m benchbench.cli`: the same as the `benchbench` command."""

import sys

from benchbench.cli import main

sys.exit(main())
