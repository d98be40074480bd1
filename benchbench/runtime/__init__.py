"""How a process runs a model on its device, below any benchbench concept: CPU threads (`threads`,
set before torch loads), the device clock (`clock`), a wall-clock limit on a cell (`deadline`), the
ranks of a data-parallel cell (`launch`) and their rendezvous (`rendezvous`), torch's
version-dependent calls (`torchcompat`), the garbage collector paused while many small objects are
made (`gcpause`), and the environment a run happens in (`envinfo`: device, versions, git commit).

Imports: the standard library, torch, and `benchbench.errors` only; every other layer may import it.
"""
