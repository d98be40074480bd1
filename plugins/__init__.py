"""benchbench's built-in plugins, installed as the package `benchbench_plugins`.

They load through the same path as third-party plugins (see benchbench.plugins.BUILTIN_PLUGINS).
"""
