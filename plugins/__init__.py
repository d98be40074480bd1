"""benchbench's built-in plugins, installed as the package `benchbench_plugins`.

Sorted by kind: models/, datasets/, protocols/. Each is listed as an entry point of the benchbench
distribution (pyproject.toml, group "benchbench") and loads through the same path as a third-party
plugin; the core names none of them.
"""
