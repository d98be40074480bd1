"""The meters: a model's size, compute, speed and cost. Parameters (`params`), forward MACs with two
counters (`flops`), remembered per model (`cache`), throughput and memory (`throughput`),
data-parallel scaling (`scaling`), the devices' peak FLOP/s (`peaks`) and memory bandwidth
(`bandwidth`), energy (`energy`, `energy_counters`), the one compute-cost formula (`compute`), prices
per device-hour (`prices`), what compiling costs and when it pays (`compile_costs`), activations as
timm's tables count them (`activations`), the bytes a forward pass moves per operator class
(`bytes_moved`), and accuracy against sets of labels (`multilabel`).

Imports: `runtime`, the contract (`specs`, `plugins`, `execution`, `precision`, `world`, `step`,
`errors`); never the store, plans, the run layer or above.
"""
