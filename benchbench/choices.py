"""The values command-line options accept, importable without torch, pandas or matplotlib.

Command modules build their parsers from these names, so that `benchbench --help` loads none of
the heavy modules that implement them; those modules import the same names from here.
"""

PRECISIONS = ("fp32", "tf32", "bf16", "fp16")
TABLE_FORMATS = ("markdown", "latex", "csv", "html", "json")
TABLE_LAYOUTS = ("models", "summary", "paper-transfer", "paper-scaling", "data-scaling", "compute")
PLOT_KINDS = ("accuracy-vs-compute", "data-scaling")
THROUGHPUT_MODES = ("infer", "train")
