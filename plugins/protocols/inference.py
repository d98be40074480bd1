"""The batch size of a forward-only pass over a whole dataset (evaluation's top-1/top-5 counts in
training.py, few-shot and linear evaluation's features in features.py): the sizes to try, largest
first, and the retry at the next one when CUDA runs out of memory.

Such a pass scores every image on its own (eval mode: no batch statistics), so its result does not
depend on the batch size; where launches, not arithmetic, bound it (a tiny model on a GPU), one CUDA
process takes up to EVAL_BATCH_MAX images a batch, halving down to the asked batch size when memory
runs out. Elsewhere, and data-parallel (every rank must run the same number of forward passes),
exactly the asked batch size: on the CPU nothing changes.
"""

from __future__ import annotations

from typing import Callable, TypeVar

import torch

T = TypeVar("T")

# On CUDA one process runs a forward-only pass at up to this many images a batch.
EVAL_BATCH_MAX = 2048


def eval_batch_sizes(batch_size: int, images: int, device: torch.device, world: int = 1) -> list[int]:
    """The batch sizes to try over `images` images, largest first (see the module docstring)."""
    target = min(EVAL_BATCH_MAX, images)
    if device.type != "cuda" or world > 1 or target <= batch_size:
        return [batch_size]
    sizes = []
    while target > batch_size:
        sizes.append(target)
        target //= 2
    return sizes + [batch_size]


def at_largest_batch(sizes: list[int], run: Callable[[int], T]) -> tuple[T, int]:
    """`run(size)` at the first of `sizes` that does not run out of CUDA memory, and that size; the
    last size's out-of-memory error is raised. Each try starts over (`run` builds what it needs)."""
    for size in sizes:
        try:
            return run(size), size
        except torch.cuda.OutOfMemoryError:
            if size == sizes[-1]:
                raise
        # here, out of the except block, the failed try's tensors (its traceback held them) are freed:
        # hand the cache back, so that the next try's free-memory reading (loader.fits_on_device) sees it
        torch.cuda.empty_cache()
    raise ValueError("no batch size to try")
