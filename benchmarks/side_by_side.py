"""benchbench against timm's own benchmark loop: same model, same device, one process, interleaved.

    python benchmarks/side_by_side.py --device cuda --precision bf16 --batch-size 256 --compile both
    python benchmarks/side_by_side.py --device cpu --models vit-mu4 --batch-size 8 --rounds 3

Needs timm (benchbench's `timm` extra: pip install -e ".[timm]"); timm is used here only.

For each pair (a benchbench model id and the timm model of the same architecture) it first checks
that the two sides compute the same model: equal parameter counts, and equal logits once timm's
weights (randomised, so that zero-initialised heads and norms cannot hide a difference) are copied
into benchbench's model. Then, for each mode (train, infer) and compile setting, it times in rounds,
alternating which side goes first (timm, benchbench, benchbench, timm, ...), so drift of the machine
hits both sides alike:

- timm: the step of timm's benchmark.py (TrainBenchmarkRunner / InferenceBenchmarkRunner, copied from
  huggingface/pytorch-image-models@aa4b5850, see `TimmRunner`): timm.create_model as that script
  calls it, timm's optimizer factory with the script's defaults (SGD, lr 1e-4), autocast, forward,
  nn.CrossEntropyLoss, backward, optimizer step, a synchronisation after every step;
  `torch.compile(model)` after `torch._dynamo.reset()` for --torchcompile.
- benchbench: benchbench.meters.throughput.measure_throughput, the code `benchbench profile` times
  (benchbench.step.train_step: autocast, float32 cross-entropy, backward, gradient clipping at norm 1,
  AdamW; or the inference forward), with the same warm-up and timed step counts.

The two training steps are the two tools' own defaults, not the same arithmetic: timm's script steps
SGD without clipping, benchbench steps AdamW with clipping (what its training runs). `--timm-opt adamw`
gives timm AdamW (still without clipping). The table prints each side's img/s (median over rounds,
and the range), and the ratio benchbench / timm (median of the per-round ratios, and their range).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from functools import partial

import torch
from torch import nn

from benchbench import precision as precision_policy
from benchbench.meters.compute import achieved_flops_per_s
from benchbench.runtime.envinfo import device_name
from benchbench.errors import BenchError
from benchbench.execution import Request, choose
from benchbench.meters.flops import count_macs
from benchbench.meters.params import count_params
from benchbench.meters.peaks import mfu, peak_flops_per_s
from benchbench.meters import compile_costs
from benchbench.meters.throughput import Inputs, Timing, measure_throughput
from benchbench.precision import Precision
from benchbench.plugins import load_catalog

TIMM_BENCHMARK = "huggingface/pytorch-image-models@aa4b5850c1543fa488abf260f18390eda46cf85d benchmark.py"
# timm's benchmark.py precision for each of benchbench's: autocast dtypes alike, float32 weights.
TIMM_PRECISION = {"fp32": "float32", "tf32": "float32", "bf16": "amp_bfloat16", "fp16": "amp"}


@dataclass(frozen=True)
class Pair:
    """A benchbench model and timm's model of the same architecture, at one input shape."""

    benchbench_id: str
    timm_name: str
    timm_kwargs: dict = field(default_factory=dict)  # timm.create_model's model kwargs (--model-kwargs)
    image_size: int = 224
    num_classes: int = 1000


PAIRS = {
    # The tiny pair: benchbench's ViT-Mu/4 (28 px, 6 layers, hidden 64, MLP 128, 4 heads), and timm's
    # VisionTransformer given the same hyper-parameters; fast enough for a CPU.
    "vit-mu4": Pair("vit-mu4", "vit_tiny_patch16_224",
                    dict(img_size=28, patch_size=4, embed_dim=64, depth=6, num_heads=4, mlp_ratio=2.0),
                    image_size=28, num_classes=10),
    "vit-ti16": Pair("vit-ti16", "vit_tiny_patch16_224"),
    "vit-b16": Pair("vit-b16", "vit_base_patch16_224"),
    "bit-r50x1": Pair("bit-r50x1", "resnetv2_50x1_bit"),
}


# --- the same model on both sides -------------------------------------------------------------------

def _vit_key(k: str) -> str:
    return k.replace("patch_embed.proj.", "patch_embed.").replace(".norm1.", ".ln1.").replace(".norm2.", ".ln2.")


def _bit_key(k: str) -> str:
    k = k.replace("stem.conv.", "stem.0.").replace("downsample.conv.", "downsample.").replace("head.fc.", "head.")
    k = re.sub(r"^stages\.(\d+)\.blocks\.(\d+)\.", r"stages.\1.\2.", k)
    return re.sub(r"\.norm(\d)\.", r".gn\1.", k)


KEY_MAPS = {"vit": _vit_key, "bit": _bit_key}  # benchbench family -> timm state-dict key -> ours


def timm_to_benchbench(timm_state: dict, family: str, ours: dict) -> dict:
    """timm's state dict under benchbench's names and shapes (a 1x1-conv head becomes a linear one)."""
    rename = KEY_MAPS[family]
    out = {}
    for k, v in timm_state.items():
        name = rename(k)
        if name in ours and v.dim() != ours[name].dim():
            v = v.reshape(ours[name].shape)
        out[name] = v
    return out


def randomise_(model: nn.Module, seed: int = 0) -> None:
    """Perturb every all-zero and all-one tensor (zero-initialised heads and last norms of residual
    branches, unit norm weights): with them left as built, equal logits would prove little."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if torch.all(p == 0):
                p.copy_(0.02 * torch.randn(p.shape, generator=g))
            elif torch.all(p == 1):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))


def count_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def check_pair(pair: Pair, spec, timm) -> dict:
    """Parameter counts of both sides and, where the family's names map, logits with timm's weights."""
    torch.manual_seed(0)
    ours = spec.build(num_classes=pair.num_classes, image_size=pair.image_size, in_chans=3)
    theirs = timm.create_model(pair.timm_name, num_classes=pair.num_classes, **pair.timm_kwargs)
    result = {"params_benchbench": count_params(ours), "params_timm": count_params(theirs),
              "gmacs": count_macs(ours, pair.image_size, 3, cross_check=False).gmacs}
    result["params_equal"] = result["params_benchbench"] == result["params_timm"]
    if spec.family not in KEY_MAPS:
        result["logits"] = f"not checked: no state-dict map for family {spec.family!r}"
        return result
    randomise_(theirs)
    try:
        ours.load_state_dict(timm_to_benchbench(theirs.state_dict(), spec.family, ours.state_dict()))
    except RuntimeError as exc:
        result["logits"] = f"not checked: timm's weights do not load: {str(exc).splitlines()[0]}"
        return result
    x = torch.randn(2, 3, pair.image_size, pair.image_size, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        a, b = ours.eval()(x), theirs.eval()(x)
    diff, scale = (a - b).abs().max().item(), b.abs().max().item()
    result.update(logits_max_abs_diff=diff, logits_max_abs=scale,
                  logits_equal=bool(diff <= 1e-4 * max(1.0, scale)))  # float32 rounding over the depth
    return result


# --- timm's side: benchmark.py's runners ------------------------------------------------------------

class TimmRunner:
    """timm's benchmark.py BenchmarkRunner + Train/InferenceBenchmarkRunner, kept to what a default
    command line (`--model M -b B --precision P [--torchcompile]`) runs: create_model with the script's
    arguments, the model moved to the device, torch._dynamo.reset() + torch.compile (inductor, default
    mode) when compiling, create_optimizer_v2(model, opt, lr=1e-4), nn.CrossEntropyLoss, a new random
    target each step, one synchronisation after each step, img/s = images / wall time of the timed
    steps. On CUDA the script sets TF32 matmuls and cudnn.benchmark process-wide at import; here
    cudnn.benchmark is set while timm's side runs, and TF32 follows benchbench's precision (fp32: off,
    tf32: on) so both sides run the same arithmetic."""

    def __init__(self, timm, pair: Pair, mode: str, device: torch.device, precision: Precision, batch_size: int,
                 compile: bool, opt: str, warmup_steps: int, steps: int):
        timm_precision = TIMM_PRECISION[precision.name]
        amp_dtype = {"amp": torch.float16, "amp_bfloat16": torch.bfloat16}.get(timm_precision)
        self.amp_autocast = (partial(torch.amp.autocast, device_type=device.type, dtype=amp_dtype)
                             if amp_dtype is not None else nullcontext)
        self.device, self.precision, self.mode = device, precision, mode
        self.model = timm.create_model(pair.timm_name, num_classes=pair.num_classes, in_chans=3, global_pool=None,
                                       scriptable=False, drop_rate=0.0, drop_path_rate=None, drop_block_rate=None,
                                       **pair.timm_kwargs)
        self.model.to(device=device, dtype=torch.float32)
        self.num_classes = self.model.num_classes
        self.compiled = compile
        if compile:
            torch._dynamo.reset()
            self.model = torch.compile(self.model, backend="inductor", mode=None)
        self.input_size = (3, pair.image_size, pair.image_size)
        self.batch_size, self.warmup_steps, self.steps = batch_size, warmup_steps, steps
        if mode == "train":
            self.model.train()
            self.loss = nn.CrossEntropyLoss().to(device)
            self.optimizer = timm.optim.create_optimizer_v2(self.model, opt=opt, lr=1e-4)
        else:
            self.model.eval()

    def _sync_time(self) -> float:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    def _train_step(self, x):
        self.optimizer.zero_grad()
        with self.amp_autocast():
            output = self.model(x)
            if isinstance(output, tuple):
                output = output[0]
            target = torch.empty((output.shape[0],), device=self.device, dtype=torch.long).random_(self.num_classes)
            self.loss(output, target).backward()
        self.optimizer.step()

    def _infer_step(self, x):
        with self.amp_autocast():
            self.model(x)

    def run(self) -> float:
        """img/s of one benchmark run: warm-up steps, then timed steps."""
        step = self._train_step if self.mode == "train" else self._infer_step
        ctx = torch.inference_mode() if self.mode == "infer" else nullcontext()
        cudnn_benchmark = torch.backends.cudnn.benchmark
        torch.backends.cudnn.benchmark = self.device.type == "cuda" or cudnn_benchmark
        try:
            with ctx, self.precision.matmul_mode():
                x = torch.randn((self.batch_size,) + self.input_size, device=self.device)
                for _ in range(self.warmup_steps):
                    step(x)
                    self._sync_time()
                start = self._sync_time()
                for _ in range(self.steps):
                    step(x)
                    self._sync_time()
                elapsed = self._sync_time() - start
        finally:
            torch.backends.cudnn.benchmark = cudnn_benchmark
        return self.batch_size * self.steps / elapsed


# --- the interleaved comparison ---------------------------------------------------------------------

def mfu_datasheet(img_per_s: float, gmacs: float, mode: str, device: torch.device,
                  precision: Precision) -> float | None:
    """Model FLOP/s (2 x MACs per image, x 3 for training) over the device's datasheet peak at the
    precision (benchbench.meters.peaks); None where the table has no entry (CPUs)."""
    if device.type != "cuda":
        return None
    return mfu(achieved_flops_per_s(img_per_s, 2 * gmacs, mode), peak_flops_per_s(device_name(device), precision.name))


@dataclass(frozen=True)
class Setup:
    """What every comparison of one invocation shares: timm, the parsed arguments, the device, the log."""

    timm: object
    args: argparse.Namespace
    device: torch.device
    log: JsonLines


def compare(setup: Setup, pair: Pair, spec, mode: str, compile: bool, gmacs: float) -> dict:
    timm, args, device = setup.timm, setup.args, setup.device
    timm_side = TimmRunner(timm, pair, mode, device, args.precision, args.batch_size, compile, args.timm_opt,
                           args.warmup, args.steps)
    ours = spec.build(num_classes=pair.num_classes, image_size=pair.image_size, in_chans=3)

    execution = choose(device, Request(compile=compile), params=count_params(ours))
    steps = compile_costs.Steps(precision=args.precision.name, resolution=pair.image_size, in_chans=3,
                                num_classes=pair.num_classes, batch_size=args.batch_size or 0)

    def benchbench_side() -> float:
        def measure():
            return measure_throughput(ours, Inputs(pair.image_size, 3, pair.num_classes, str(device)), mode=mode,
                                      precision=args.precision, batch_size=args.batch_size, execution=execution,
                                      timing=Timing(args.warmup, args.steps, 0.0))

        # a training step's compile and step times inform the break-even, as a training cell's do
        result = compile_costs.remembered(spec, ours, device, steps, execution, measure) if mode == "train" \
            else measure()
        return result.img_per_s

    timm_ips, ours_ips = [], []
    sides = {"timm": (timm_side.run, timm_ips), "benchbench": (benchbench_side, ours_ips)}
    for r in range(args.rounds):
        # alternate who goes first: timm, ours | ours, timm | ... (--first benchbench: ours, timm | ...)
        order = ("timm", "benchbench") if (r % 2 == 0) == (args.first == "timm") else ("benchbench", "timm")
        for side in order:
            measure, values = sides[side]
            values.append(measure())
            if args.jsonl_runs:
                setup.log.write("run", {"model": pair.benchbench_id, "mode": mode, "compiled": compile, "round": r,
                                        "side": side, "img_per_s": values[-1]})
    ratios = [o / t for o, t in zip(ours_ips, timm_ips)]
    del timm_side, ours
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return {
        "model": pair.benchbench_id, "timm_model": pair.timm_name, "mode": mode, "compiled": compile,
        "timm_img_per_s": timm_ips, "benchbench_img_per_s": ours_ips, "ratio": ratios,
        "timm_median": statistics.median(timm_ips), "benchbench_median": statistics.median(ours_ips),
        "ratio_median": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
        "mfu_datasheet_timm": mfu_datasheet(statistics.median(timm_ips), gmacs, mode, device, args.precision),
        "mfu_datasheet_benchbench": mfu_datasheet(statistics.median(ours_ips), gmacs, mode, device, args.precision),
    }


def parse_pairs(names: list[str], catalog) -> list[tuple[Pair, object]]:
    """Pairs by benchbench id (a known pair), or `ID=TIMM_NAME` for any other, at ID's default resolution."""
    pairs = []
    for name in names:
        if "=" in name:
            bid, tname = name.split("=", 1)
            spec = catalog.models.get(bid)
            pair = Pair(spec.id, tname, image_size=spec.default_resolution)
        else:
            spec = catalog.models.get(name)
            if spec.id not in PAIRS:
                raise BenchError(f"model {name!r} has no timm pair here; known pairs: {', '.join(PAIRS)}; "
                                 f"or give one as ID=TIMM_NAME, e.g. {spec.id}=vit_base_patch16_224")
            pair = PAIRS[spec.id]
        pairs.append((pair, spec))
    return pairs


def _range(values: list[float], fmt: str) -> str:
    return f"{format(min(values), fmt)}-{format(max(values), fmt)}"


def table(rows: list[dict]) -> str:
    from tabulate import tabulate

    body = [[r["model"], r["timm_model"], r["mode"], "compiled" if r["compiled"] else "eager",
             f"{r['timm_median']:.4g}", _range(r["timm_img_per_s"], ".4g"),
             f"{r['benchbench_median']:.4g}", _range(r["benchbench_img_per_s"], ".4g"),
             f"{r['ratio_median']:.3f}", _range(r["ratio"], ".3f")] for r in rows]
    return tabulate(body, headers=["benchbench", "timm", "mode", "run", "timm img/s", "range",
                                   "benchbench img/s", "range", "ratio bb/timm", "ratio range"],
                    tablefmt="github", disable_numparse=True)


class JsonLines:
    """--jsonl FILE: each line appended and flushed as soon as it is known; nothing without a FILE."""

    def __init__(self, path: str | None):
        self.path = path

    def write(self, kind: str, fields: dict) -> None:
        if self.path:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(json.dumps({"kind": kind, **fields}) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=["vit-mu4"], metavar="ID",
                   help=f"benchbench ids with a timm pair ({', '.join(PAIRS)}) or ID=TIMM_NAME; default vit-mu4")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--precision", default="auto", choices=precision_policy.CHOICES)
    p.add_argument("--compile", nargs="?", const="on", default="off", choices=("off", "on", "both"),
                   help="off (eager), on (torch.compile both sides), both (eager, then compiled); "
                        "--compile alone = on")
    p.add_argument("--mode", default="both", choices=("train", "infer", "both"))
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    p.add_argument("--warmup", type=int, default=10, help="warm-up steps per run (timm's default 10)")
    p.add_argument("--steps", type=int, default=40, help="timed steps per run (timm's default 40)")
    p.add_argument("--timm-opt", default="sgd", help="timm's optimizer (benchmark.py's --opt; default sgd)")
    p.add_argument("--threads", type=int, default=None,
                   help="CPU threads for torch (default: torch's); 1 is steadier on a busy machine")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the tables")
    p.add_argument("--jsonl", metavar="FILE", default=None,
                   help="also append to FILE, as each is known, a JSON line for the run's header, each model's "
                        "check and each measured row (kind: header | check | row): a run stopped midway keeps "
                        "what it measured (scripts/gpu-check.sh)")
    p.add_argument("--jsonl-runs", action="store_true",
                   help="with --jsonl, also a line per side's timed run as it ends (kind: run; its round and "
                        "img/s): a row stopped before its last round keeps the runs it had")
    p.add_argument("--first", default="timm", choices=("timm", "benchbench"),
                   help="the side that runs first in the first round (default timm); benchbench: its compiled "
                        "figure comes before timm's compile, where a cap may cut it")
    args = p.parse_args(argv)
    try:
        import timm
        import timm.optim
    except ImportError:
        print("error: timm is not installed; install benchbench's timm extra: pip install -e '.[timm]'",
              file=sys.stderr)
        return 2
    try:
        if args.rounds < 1 or args.steps < 1 or args.warmup < 0 or args.batch_size < 1:
            raise BenchError("--rounds, --steps and --batch-size must be at least 1, --warmup at least 0")
        if args.threads is not None and args.threads < 1:
            raise BenchError(f"--threads {args.threads}: must be at least 1")
        device = torch.device(args.device)
        args.precision = precision_policy.resolve(args.precision, device)
        catalog = load_catalog(entry_points=False)
        pairs = parse_pairs(args.models, catalog)
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    modes = ("train", "infer") if args.mode == "both" else (args.mode,)
    compiles = {"off": (False,), "on": (True,), "both": (False, True)}[args.compile]
    header = {"device": str(device), "device_name": device_name(device), "precision": args.precision.name,
              "batch_size": args.batch_size, "rounds": args.rounds, "warmup_steps": args.warmup,
              "steps": args.steps, "timm_opt": args.timm_opt, "torch": torch.__version__,
              "timm": timm.__version__, "timm_benchmark": TIMM_BENCHMARK, "threads": torch.get_num_threads(),
              "loadavg": os.getloadavg()}
    log = JsonLines(args.jsonl)
    log.write("header", header)
    setup = Setup(timm, args, device, log)
    if not args.json:
        print(f"# {header['device_name']} ({device}), {args.precision}, batch {args.batch_size}, "
              f"{args.rounds} rounds x {args.steps} steps (+{args.warmup} warm-up); torch {torch.__version__}, "
              f"timm {timm.__version__}; timm's step: {args.timm_opt}, benchbench's: AdamW + clip 1.0", flush=True)
    checks, rows = {}, []
    for pair, spec in pairs:
        checks[pair.benchbench_id] = check = check_pair(pair, spec, timm)
        log.write("check", {"model": pair.benchbench_id, **check})
        if not args.json:
            logits = (check["logits"] if "logits" in check else
                      f"logits with timm's weights: max |diff| {check['logits_max_abs_diff']:.2e} "
                      f"(max |logit| {check['logits_max_abs']:.2f}): {'equal' if check['logits_equal'] else 'DIFFER'}")
            print(f"{pair.benchbench_id} vs timm {pair.timm_name}: params {check['params_benchbench']:,} vs "
                  f"{check['params_timm']:,} ({'equal' if check['params_equal'] else 'DIFFER'}); {logits}", flush=True)
        for mode in modes:
            for compile in compiles:
                rows.append(row := compare(setup, pair, spec, mode, compile, check["gmacs"]))
                log.write("row", row)
                print(f"  {pair.benchbench_id} {mode} {'compiled' if compile else 'eager'}: ratio "
                      f"{row['ratio_median']:.3f} ({len(row['ratio'])} rounds)", file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps({**header, "checks": checks, "rows": rows}, indent=1))
    else:
        print()
        print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
