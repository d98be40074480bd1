"""Fits the projection's constants on the shipped timm tables (results/references/timm-benchmarks) and
writes benchbench/projection/constants.json: the fold `all` (what `benchbench project` uses) and one fold
per device with that device's tables left out (what `benchbench project validate` uses for a target it
names). Every constant says which tables and pairs it was fitted on (`fitted_on`).

    .venv/bin/python scripts/fit_projection.py [--out FILE]
"""

from benchbench.projection.fit import main

if __name__ == "__main__":
    main()
