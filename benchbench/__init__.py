"""benchbench: a plugin-based harness comparing Vision Transformers with CNN baselines."""

# First, before anything imports torch: how idle OpenMP threads wait (libgomp reads it once, when
# torch loads it). Every process that runs benchbench code imports this package first: the command,
# a Slurm job, a Ray task, a rank.
from benchbench.runtime import threads as _threads
_threads.prepare_environment()

from benchbench.hookspecs import hookimpl  # noqa: E402

__version__ = "0.1.0"
__all__ = ["hookimpl", "__version__"]
