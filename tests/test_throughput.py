"""Throughput, peaks and MFU: the logic, never the timings (those are noisy; see benchmarks/)."""

import dataclasses
import json
import resource

import pytest
import torch
from torch import nn

import benchbench.cli
from benchbench.cli import device_cmd, profile_cmd
from benchbench.runtime.envinfo import device_name
from benchbench.errors import BenchError
from benchbench.meters import peaks
from benchbench.meters.compute import achieved_flops_per_s
from benchbench.meters.peaks import lookup, measured_matmul_flops, mfu, peak_flops_per_s
from benchbench.execution import Request, choose
from benchbench.meters.throughput import Inputs, Throughput, Timing, is_oom, largest_batch, measure_throughput
from benchbench.precision import Precision, resolve
from benchbench_plugins.models import vision_transformer as vit

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
FAST = dict(warmup_steps=1, min_steps=2, min_seconds=0.0)  # logic, not timing: as few steps as possible
FAST_ARGS = ["--warmup-steps", "1", "--min-steps", "2", "--min-seconds", "0"]


@pytest.fixture(autouse=True)
def one_thread():
    """Two cores shared with other work: one thread is steadier (and kinder) than two."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def main(monkeypatch):
    """benchbench.cli.main with the profile and device commands (whether or not COMMANDS has them yet)."""
    extra = tuple(c for c in (profile_cmd, device_cmd) if c not in benchbench.cli.COMMANDS)
    monkeypatch.setattr(benchbench.cli, "COMMANDS", benchbench.cli.COMMANDS + extra)
    return benchbench.cli.main


def measure(model, image_size, *, num_classes=10, device="cpu", precision="fp32", mode="infer", compile=None,
            channels_last=None, warmup_steps=10, min_steps=20, min_seconds=2.0, latency=False, latency_repeats=100,
            **kw) -> Throughput:
    """measure_throughput of synthetic 3-channel inputs, the precision resolved for the mode as a command
    resolves it, `compile` and `channels_last` (None: the policy's) as an execution request."""
    device = torch.device(device)
    given = Request(compile=compile, channels_last=channels_last)
    execution = None if given == Request() else choose(device, given)
    timing = Timing(warmup_steps, min_steps, min_seconds, latency=latency, latency_repeats=latency_repeats)
    return measure_throughput(model, Inputs(image_size, 3, num_classes, str(device)), mode=mode,
                              precision=resolve(precision, device, mode="infer" if mode == "infer" else "train"),
                              execution=execution, timing=timing, **kw)


def tiny() -> nn.Module:
    return vit.create("Mu", 7, image_size=28, num_classes=10)


class FitsUpTo(nn.Module):
    """A model that runs out of memory above `limit` images, the way CUDA or a CPU allocator says it."""

    def __init__(self, limit: int, error=torch.cuda.OutOfMemoryError):
        super().__init__()
        self.limit, self.error, self.batches = limit, error, []
        self.inner = nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 10))

    def forward(self, x):
        self.batches.append(x.shape[0])
        if x.shape[0] > self.limit:
            raise self.error(f"CUDA out of memory. Tried to allocate {x.shape[0]} GiB")
        return self.inner(x)


# --- measure_throughput -------------------------------------------------------------------------

def test_infer_result_fields_and_units():
    model = tiny().train()
    r = measure(model, 28, num_classes=10, device="cpu", batch_size=4, **FAST)
    assert isinstance(r, Throughput) and dataclasses.is_dataclass(r)
    assert (r.mode, r.device, r.precision, r.batch_size, r.batch_size_requested) == ("infer", "cpu", "fp32", 4, 4)
    assert r.device_name == device_name(torch.device("cpu"))
    assert r.oom_retries == 0 and r.steps >= 2 and not r.channels_last and not r.compiled
    assert r.img_per_s == pytest.approx(r.batch_size * r.steps / r.timed_s)
    assert 0 < r.step_ms <= 1e3 * r.timed_s
    # CPU peak memory is the process's lifetime peak RSS (KiB on Linux), in MiB.
    assert r.peak_mem_kind == "process_max_rss"
    assert 10 < r.peak_mem_mb <= resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    assert r.latency_ms_p50 is r.latency_ms_p90 is r.latency_ms_p99 is None
    assert model.training  # the caller's mode is given back


def test_train_takes_real_optimiser_steps_and_latency_is_ordered():
    model = tiny()
    before = [p.detach().clone() for p in model.parameters()]
    r = measure(model, 28, num_classes=10, device="cpu", mode="train", batch_size=4,
                           channels_last=True, latency=True, latency_repeats=5, **FAST)
    assert r.mode == "train" and r.channels_last
    changed = sum(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert changed == len(before)  # AdamW touched every weight (the zero head gets gradients too)
    assert 0 < r.latency_ms_p50 <= r.latency_ms_p90 <= r.latency_ms_p99


@pytest.mark.parametrize("error", [torch.cuda.OutOfMemoryError, RuntimeError])
def test_batch_search_ends_at_the_largest_that_fits(error):
    model = FitsUpTo(40, error)
    r = measure(model, 8, num_classes=10, device="cpu", max_batch_size=1024, **FAST)
    assert r.batch_size == 32 and r.batch_size_requested is None and r.oom_retries == 1
    assert model.batches[:4] == [8, 16, 32, 64]  # doubled from 8 until out of memory
    assert set(model.batches[4:]) == {32}  # then measured at the last batch that fitted


def test_batch_search_halves_below_the_start():
    model = FitsUpTo(5)
    r = measure(model, 8, num_classes=10, device="cpu", **FAST)
    assert (r.batch_size, r.oom_retries) == (4, 1)
    assert model.batches[:2] == [8, 4]


def test_batch_search_stops_at_the_cap():
    r = measure(FitsUpTo(10**6), 8, num_classes=10, device="cpu", max_batch_size=20, **FAST)
    assert (r.batch_size, r.oom_retries) == (16, 0)


def test_fixed_batch_out_of_memory_halves_and_records_it():
    model = FitsUpTo(20)
    r = measure(model, 8, num_classes=10, device="cpu", batch_size=64, **FAST)
    assert (r.batch_size, r.batch_size_requested, r.oom_retries) == (16, 64, 2)
    assert model.batches[:3] == [64, 32, 16]


def test_nothing_fits_and_other_errors_propagate():
    with pytest.raises(BenchError, match="out of memory at batch size 1"):
        measure(FitsUpTo(0), 8, num_classes=10, device="cpu", **FAST)
    with pytest.raises(BenchError, match="out of memory at batch size 1"):
        measure(FitsUpTo(0), 8, num_classes=10, device="cpu", batch_size=2, **FAST)

    class Broken(FitsUpTo):
        def forward(self, x):
            raise ValueError("not an OOM")

    with pytest.raises(ValueError, match="not an OOM"):
        measure(Broken(8), 8, num_classes=10, device="cpu", **FAST)


def test_largest_batch_search_order():
    tried = []

    def fits(b):
        tried.append(b)
        return b <= 100

    assert largest_batch(fits, 8, 4096) == (64, 1) and tried == [8, 16, 32, 64, 128]
    assert largest_batch(lambda b: True, 3, 3) == (3, 0)
    assert largest_batch(lambda b: b <= 2, 16, 4096) == (2, 3)


def test_oom_recognition():
    assert is_oom(torch.cuda.OutOfMemoryError("CUDA out of memory"))
    assert is_oom(RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: not enough memory"))
    assert is_oom(RuntimeError("CUDA error: out of memory"))
    assert not is_oom(RuntimeError("shape mismatch")) and not is_oom(ValueError("out of memory"))


def test_precision_and_mode_checks():
    model = tiny()
    with pytest.raises(BenchError, match="'fp16' on the CPU"):
        measure(model, 28, num_classes=10, device="cpu", precision="fp16", **FAST)
    with pytest.raises(BenchError, match="'tf32' needs a CUDA device"):
        measure(model, 28, num_classes=10, device="cpu", precision="tf32", **FAST)
    with pytest.raises(BenchError, match="allowed: auto, fp32, tf32, bf16, fp16$"):  # inference: no fp8
        measure(model, 28, num_classes=10, device="cpu", precision="fp4", **FAST)
    with pytest.raises(BenchError, match="allowed: auto, fp32, tf32, bf16, fp16, fp8"):
        measure(model, 28, num_classes=10, device="cpu", precision="fp4", mode="train", **FAST)
    with pytest.raises(BenchError, match="'fp8' needs a CUDA GPU of compute capability >= 8.9"):
        measure(model, 28, num_classes=10, device="cpu", precision="fp8", mode="train", **FAST)
    with pytest.raises(BenchError, match="float8 training .* fp8 inference is a different method"):
        measure(model, 28, num_classes=10, device="cuda", precision="fp8", **FAST)  # before CUDA
    with pytest.raises(BenchError, match="float8 training .* fp8 inference is a different method .* or mode='train'"):
        measure_throughput(model, Inputs(28), precision=Precision("fp8", "cpu"), timing=Timing(**FAST))
    with pytest.raises(BenchError, match="allowed: infer, train"):
        measure(model, 28, num_classes=10, device="cpu", mode="eval", **FAST)


# --- peaks, achieved FLOP/s, MFU --------------------------------------------------------------------

def test_mfu_arithmetic():
    assert mfu(250e12, 1000e12) == pytest.approx(0.25)
    assert mfu(1e12, None) is None and mfu(1e12, 0.0) is None


def test_achieved_flops_counts_training_as_three_forwards():
    # 1000 img/s of a 35.13-GFLOP (ViT-B/16) forward: 35.13 TFLOP/s inferring, 105.39 training.
    assert achieved_flops_per_s(1000, 35.13, "infer") == pytest.approx(35.13e12)
    assert achieved_flops_per_s(1000, 35.13, "train") == pytest.approx(3 * 35.13e12)
    with pytest.raises(ValueError):
        achieved_flops_per_s(1000, 35.13, "eval")


# Device names as torch.cuda.get_device_name prints them -> the entry, and dense figures from the
# datasheets (half of the sparse figure where the sheet prints only that).
@pytest.mark.parametrize("device_name, entry, precision, tflops", [
    ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM", "bf16", 1979 / 2),
    ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM", "fp32", 67),
    ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM", "tf32", 989 / 2),
    ("NVIDIA H100 PCIe", "NVIDIA H100 PCIe", "fp16", 1513 / 2),
    ("NVIDIA H100 NVL", "NVIDIA H100 NVL", "bf16", 1671 / 2),
    ("NVIDIA H200", "NVIDIA H200 SXM", "bf16", 1979 / 2),
    ("NVIDIA H200 NVL", "NVIDIA H200 NVL", "bf16", 1671 / 2),
    ("NVIDIA GH200 480GB", "NVIDIA GH200", "bf16", 1979 / 2),
    ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB", "bf16", 312),
    ("NVIDIA A100-SXM4-40GB", "NVIDIA A100 40GB", "tf32", 156),
    ("NVIDIA A100 80GB PCIe", "NVIDIA A100 80GB", "fp32", 19.5),
    ("NVIDIA GeForce RTX 3090", "NVIDIA GeForce RTX 3090", "fp16", 71),
    ("NVIDIA GeForce RTX 5090", "NVIDIA GeForce RTX 5090", "bf16", 209.5),
    ("TPU v5e", "TPU v5e chip", "bf16", 197),
    ("Tesla V100-SXM2-16GB", "NVIDIA V100 SXM2", "fp16", 125),
    ("Tesla V100-PCIE-32GB", "NVIDIA V100 PCIe", "fp32", 14),
    ("Tesla V100S-PCIE-32GB", "NVIDIA V100S PCIe", "fp16", 130),
    ("NVIDIA L4", "NVIDIA L4", "bf16", 242 / 2),
    ("NVIDIA L40S", "NVIDIA L40S", "bf16", 362.05),
    ("NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 4090", "fp16", 165.2),
    ("Tesla T4", "NVIDIA T4", "fp16", 65),
    ("TPU v3", "TPU v3 core", "bf16", 123 / 2),
    # FP8 tensor cores (compute capability >= 8.9): the datasheets' sparse figure / 2
    ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM", "fp8", 3958 / 2),
    ("NVIDIA H100 PCIe", "NVIDIA H100 PCIe", "fp8", 3026 / 2),
    ("NVIDIA H200", "NVIDIA H200 SXM", "fp8", 3958 / 2),
    ("NVIDIA L40S", "NVIDIA L40S", "fp8", 733),  # the L40S sheet prints its dense column: 733 (1,466*)
    ("NVIDIA L4", "NVIDIA L4", "fp8", 485 / 2),
])
def test_peak_table_lookup(device_name, entry, precision, tflops):
    assert lookup(device_name).name == entry
    assert peak_flops_per_s(device_name, precision) == pytest.approx(tflops * 1e12)


@pytest.mark.parametrize("device_name, precision", [
    ("AMD EPYC (2 threads)", "fp32"), ("NVIDIA L40", "bf16"), ("NVIDIA GeForce RTX 4090 D", "bf16"),
    ("Tesla V100-SXM2-32GB", "bf16"), ("Tesla V100-SXM2-32GB", "tf32"), ("TPU v3", "fp32"), ("NVIDIA H800", "bf16"),
    # no fp8 tensor cores, or an fp8 row not confirmed from its datasheet: no figure rather than a guess
    ("NVIDIA A100-SXM4-80GB", "fp8"), ("Tesla T4", "fp8"), ("NVIDIA H100 NVL", "fp8"), ("NVIDIA H200 NVL", "fp8"),
    ("NVIDIA GH200 480GB", "fp8"), ("NVIDIA GeForce RTX 4090", "fp8"),
])
def test_peak_unknown_is_none(device_name, precision):
    assert peak_flops_per_s(device_name, precision) is None


def test_peak_table_is_sane():
    for _, peak in peaks.PEAKS:
        assert peak.source and peak.unit in ("GPU", "TPU core")
        assert set(peak.flops_per_s) <= {"fp32", "tf32", "bf16", "fp16", "fp8"}
        assert all(1e12 <= v <= 2e15 for v in peak.flops_per_s.values())  # dense, in FLOP/s


def test_fp8_peaks_are_twice_bf16_on_hopper_and_ada():
    """An FP8 tensor-core op takes half a BF16 one's time on Hopper and Ada (the architecture whitepapers'
    per-SM rates), so a dense fp8 peak is twice the bf16 one: exact for the Hopper parts; within 1.5 % for
    the Ada parts, whose sheets round (L4: BF16 242*, FP8 485*; L40S: a dense BF16 of 362.05 beside
    733* sparse and FP8 733)."""
    with_fp8 = [peak for _, peak in peaks.PEAKS if "fp8" in peak.flops_per_s]
    assert {p.name for p in with_fp8} == {"NVIDIA H100 SXM", "NVIDIA H100 PCIe", "NVIDIA H200 SXM", "NVIDIA L40S",
                                          "NVIDIA L4"}
    for peak in with_fp8:
        ratio = peak.flops_per_s["fp8"] / peak.flops_per_s["bf16"]
        assert ratio == (pytest.approx(2, rel=0.015) if peak.name in ("NVIDIA L40S", "NVIDIA L4") else 2), peak.name


def test_measured_matmul_flops_is_2n3_over_the_best_timed_product(monkeypatch):
    """The FLOP/s of an n x n x n product: 2 n^3 over the fastest of the timed repeats, warm-up left out.
    A fake clock makes the products take 0.9 (warm-up), then 0.5, 0.25 and 0.4 s."""
    durations = iter([0.9, 0.5, 0.25, 0.4])
    clock = {"now": 0.0, "pending": None}

    def perf_counter():
        if clock["pending"] is None:
            clock["pending"] = next(durations)
            return clock["now"]
        clock["now"] += clock["pending"]
        clock["pending"] = None
        return clock["now"]

    monkeypatch.setattr(peaks.time, "perf_counter", perf_counter)
    flops = measured_matmul_flops("cpu", resolve("fp32", torch.device("cpu")), n=64, warmup=1, repeats=3)
    assert flops == 2 * 64**3 / 0.25


def test_the_fp8_matmul_is_the_float8_product_of_its_operands():
    """`device --precision fp8` times torch._scaled_mm on float8 e4m3 operands (run here on the CPU,
    where torch computes it too): its bf16 result is the float32 product of the same float8 values,
    rounded to bf16. The operands are redrawn from the same seed for the reference."""
    cpu = torch.device("cpu")
    torch.manual_seed(0)
    got = peaks.matmul(cpu, "fp8", 64)()
    torch.manual_seed(0)
    a, b = (torch.randn(64, 64).to(torch.float8_e4m3fn).float() for _ in range(2))
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), a @ b, rtol=2**-7, atol=1e-2)  # bf16: 8 significant bits
    with pytest.raises(BenchError, match="multiples of 16"):
        peaks.matmul(cpu, "fp8", 60)


# --- the commands -------------------------------------------------------------------------------------

PROFILE_FIELDS = {"id", "device", "device_name", "precision", "mode", "batch_size", "img_per_s", "step_ms",
                  "peak_mem_mb", "gmacs", "gflops", "achieved_tflops", "peak_tflops_table", "peak_tflops_measured",
                  "mfu_table", "mfu_measured", "flops_status"}
LATENCY_FIELDS = {"latency_ms_p50", "latency_ms_p90", "latency_ms_p99"}


def test_profile_json_has_the_promised_fields(main, capsys):
    rc = main(["profile", "ViT-Mu/7", "--device", "cpu", "--batch-size", "4", "--num-classes", "10",
               "--matmul-n", "64", "--latency", "--json", *FAST_ARGS])
    out, err = capsys.readouterr()
    assert rc == 0, err
    row = json.loads(out)
    assert PROFILE_FIELDS | LATENCY_FIELDS <= set(row)
    assert (row["id"], row["device"], row["precision"], row["mode"], row["batch_size"]) == ("vit-mu7", "cpu", "fp32",
                                                                                            "infer", 4)
    assert row["flops_status"] == "ok" and row["gflops"] == pytest.approx(2 * row["gmacs"])
    assert row["achieved_tflops"] == pytest.approx(row["img_per_s"] * row["gflops"] / 1e3)
    assert row["mfu_measured"] == pytest.approx(row["achieved_tflops"] / row["peak_tflops_measured"])
    assert row["peak_tflops_table"] is None and row["mfu_table"] is None  # no CPU in the table
    assert row["latency_ms_p50"] <= row["latency_ms_p99"]


def test_profile_train_counts_three_forwards_and_prints_a_block(main, capsys):
    rc = main(["profile", "bit-r20x1-small", "--device", "cpu", "--mode", "train", "--batch-size", "2",
               "--num-classes", "10", "--matmul-n", "64", *FAST_ARGS])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "bit-r20x1-small (BiT-R20x1 (28px)) at 28 px, 10 classes: train, fp32" in out
    for label in ("throughput", "peak memory", "compute", "MFU (table)   n/a", "MFU (matmul)", "3 x forward",
                  "  execution     eager, for-each optimizer, contiguous, attention sdpa (policy cpu: eager off CUDA)"):
        assert label in out
    assert "latency" not in out
    assert main(["profile", "bit-r20x1-small", "--device", "cpu", "--mode", "train", "--batch-size", "2",
                 "--num-classes", "10", "--matmul-n", "64", "--json", *FAST_ARGS]) == 0
    row = json.loads(capsys.readouterr().out)
    assert not LATENCY_FIELDS & set(row)
    assert row["achieved_tflops"] == pytest.approx(3 * row["img_per_s"] * row["gflops"] / 1e3)


def test_device_json(main, capsys):
    assert main(["device", "--device", "cpu", "--matmul-n", "64", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert {"device", "device_name", "precision", "peak_tflops_table", "peak_tflops_measured"} <= set(row)
    assert row["device"] == "cpu" and row["precision"] == "fp32" and row["peak_tflops_measured"] > 0
    assert main(["device", "--device", "cpu", "--matmul-n", "64"]) == 0
    assert "not in the table" in capsys.readouterr().out
    assert main(["device", "--device", "cpu", "--matmul-n", "64", "--precision", "auto", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["precision"] == "fp32"  # auto, resolved: fp32 off CUDA


def test_bad_input_exits_2_with_a_clear_message(main, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["profile", "vit-mu7", "--precision", "fp4"])
    assert exc.value.code == 2
    assert "argument --precision: invalid choice: 'fp4'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["device", "--precision", "int8"])
    assert exc.value.code == 2
    assert main(["profile", "vit-mu5", "--device", "cpu"]) == 2
    assert "unknown model id 'vit-mu5'; did you mean" in capsys.readouterr().err
    assert main(["profile", "vit-mu7", "--device", "cpu", "--precision", "fp16"]) == 2
    assert "error: precision 'fp16' on the CPU" in capsys.readouterr().err
    assert main(["profile", "vit-mu7", "--device", "cpu", "--resolution", "30"]) == 2
    assert "vit-mu7 at 30 px: image size 30 is not divisible by patch size 7" in capsys.readouterr().err
    assert main(["device", "--device", "tpu"]) == 2
    assert "allowed: auto, cpu, cuda" in capsys.readouterr().err


# --- CUDA ---------------------------------------------------------------------------------------------

@pytest.mark.gpu
@CUDA
@pytest.mark.parametrize("mode", ["infer", "train"])
@pytest.mark.parametrize("precision", ["fp32", "tf32", "bf16", "fp16"])
def test_cuda_throughput(mode, precision):
    flags = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    r = measure(vit.create("Ti", 16), 224, num_classes=1000, device="cuda", mode=mode,
                           precision=precision, batch_size=32, warmup_steps=2, min_steps=5, min_seconds=0.0,
                           compile=False)  # the measurement, not the policy (tests/test_execution.py)
    assert r.device == "cuda" and r.peak_mem_kind == "cuda_max_allocated" and r.img_per_s > 0
    assert r.peak_mem_mb > 5.7 * 4 / 1.048576 * (3 if mode == "train" else 1)  # weights (+ AdamW moments)
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == flags  # restored


@pytest.mark.gpu
@CUDA
def test_cuda_batch_search_meets_a_real_out_of_memory():
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(2 * 2**30 / total)  # 2 GiB for this test
    try:
        r = measure(vit.create("S", 16), 224, num_classes=1000, device="cuda", mode="train",
                               warmup_steps=1, min_steps=2, min_seconds=0.0, compile=False)
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
        torch.cuda.empty_cache()
    assert r.oom_retries >= 1 and 8 <= r.batch_size < 2048 and r.peak_mem_mb < 2048


@pytest.mark.gpu
@CUDA
def test_cuda_compile_latency_and_peaks():
    r = measure(vit.create("Ti", 16), 224, num_classes=1000, device="cuda", precision="bf16",
                           batch_size=64, compile=True, latency=True, latency_repeats=20, warmup_steps=3,
                           min_steps=5, min_seconds=0.0)
    assert r.compiled and 0 < r.latency_ms_p50 <= r.latency_ms_p99
    name = torch.cuda.get_device_name()
    measured = measured_matmul_flops("cuda", resolve("bf16", torch.device("cuda")))
    table = peak_flops_per_s(name, "bf16")
    if table is not None:  # a datasheet peak is an upper bound a big matmul gets near to
        assert 0.3 * table < measured < 1.05 * table


@pytest.mark.gpu
@CUDA
def test_cuda_profile_json(main, capsys):
    assert main(["profile", "vit-ti16", "--device", "cuda", "--precision", "bf16", "--mode", "train",
                 "--json", *FAST_ARGS]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["batch_size_requested"] is None and row["batch_size"] >= 8 and row["device"] == "cuda"
    if lookup(row["device_name"]) is not None:
        assert 0 < row["mfu_table"] < 1 and row["peak_tflops_table"] > 0
    assert 0 < row["mfu_measured"] < 1


FP8_GPU = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 9),
                             reason="needs a CUDA GPU of compute capability >= 8.9")


@pytest.mark.gpu
@FP8_GPU
def test_cuda_fp8_matmul_peak_and_training_profile(main, capsys):
    """fp8 where a float8-capable GPU is: the float8 matmul gets near the datasheet's dense fp8 peak (an upper
    bound), and `profile --mode train --precision fp8` trains ViT-Ti/16 with torchao's Float8Linear layers,
    its MFU against that fp8 peak."""
    pytest.importorskip("torchao")
    name = torch.cuda.get_device_name()
    measured = measured_matmul_flops("cuda", resolve("fp8", torch.device("cuda")))
    table = peak_flops_per_s(name, "fp8")
    if table is not None:
        assert 0.3 * table < measured < 1.05 * table
    assert main(["profile", "vit-ti16", "--device", "cuda", "--precision", "fp8", "--mode", "train",
                 "--batch-size", "64", "--json", *FAST_ARGS]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["precision"] == "fp8" and row["img_per_s"] > 0
    assert row["peak_tflops_table"] == (table / 1e12 if table else None)


def test_a_long_measurement_says_how_it_goes_and_a_short_one_says_nothing(monkeypatch):
    """Progress: silent for its first 5 s, then a line at least 10 s apart with the phase, the steps done,
    the time a step takes and what is left (a fake clock: each step takes 2 s)."""
    from benchbench.meters import throughput

    now = {"t": 0.0}
    monkeypatch.setattr(throughput.time, "monotonic", lambda: now["t"])
    lines = []
    progress = throughput.Progress(lines.append)

    def step():
        now["t"] += 2.0

    timed = progress.wrap(step, "timed steps at batch 64", total=20)
    for _ in range(12):
        timed()
    assert lines == ["timed steps at batch 64: 3 steps of 20, 2.0 s a step, about 34 s left",
                     "timed steps at batch 64: 8 steps of 20, 2.0 s a step, about 24 s left"]
    quiet = throughput.Progress(None)
    assert quiet.wrap(step, "x") is step
    r = measure(tiny(), 28, batch_size=4, **FAST)  # about a second: nothing said
    assert r.steps >= 2
