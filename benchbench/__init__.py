"""benchbench: a plugin-based harness comparing Vision Transformers with CNN baselines."""

from benchbench.hookspecs import hookimpl

__version__ = "0.1.0"
__all__ = ["hookimpl", "__version__"]
