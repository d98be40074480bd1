"""The values command-line options accept, importable without torch, pandas or matplotlib.

Command modules build their parsers from these names, so that `benchbench --help` loads none of
the heavy modules that implement them; those modules import the same names from here.
"""

PRECISIONS = ("fp32", "tf32", "bf16", "fp16")
# What a precision setting, and the --precision of `profile`, `cost` and `device`, accept (the policy
# is benchbench.precision: `auto` resolves per device, fp8 is torchao's float8 training).
PRECISION_CHOICES = ("auto", *PRECISIONS, "fp8")
PRECISION_DEFAULT = "auto"  # every precision setting's and option's default (benchbench.precision.DEFAULT)
PRECISION_HELP = ("auto | fp32 | tf32 | bf16 | fp16 | fp8; auto = bf16 on CUDA, else fp32; fp32 is IEEE (TF32 off), "
                  "tf32 needs CUDA, fp16 is refused on the CPU, fp8 (torchao float8 training) needs a CUDA GPU of "
                  "compute capability >= 8.9 and pip install 'benchbench[fp8]'")
# fp8 is a training method; what forward-only measurements and protocols say when asked for it.
FP8_INFERENCE = ("precision 'fp8' is torchao's float8 training (Linear layers whose forward and backward "
                 "matmuls run in float8 with dynamic scaling); fp8 inference is a different method that this "
                 "harness does not measure: use bf16 for inference")
TABLE_FORMATS = ("markdown", "latex", "csv", "html", "json")
TABLE_LAYOUTS = ("models", "summary", "paper-transfer", "paper-scaling", "data-scaling", "compute", "timm",
                 "intervals")
PLOT_KINDS = ("accuracy-vs-compute", "data-scaling")
THROUGHPUT_MODES = ("infer", "train")


def resolved_precision(precision: str, device_type: str) -> str:
    """The precision `precision` means on a device of this type ("cuda", "cpu", ...): `auto` is bf16 on
    CUDA, else fp32; every other value means itself (benchbench.precision.resolve, and the tables that
    keep a record's precision apart, which read a device from a record without importing torch)."""
    if precision == "auto":
        return "bf16" if device_type == "cuda" else "fp32"
    return precision
