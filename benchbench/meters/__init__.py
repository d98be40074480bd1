"""The meters that read a model's size, compute and speed: parameters, forward MACs (two counters), throughput, memory, data-parallel scaling, the devices' peak FLOP/s."""
