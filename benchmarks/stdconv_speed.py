"""Forms of BiT's weight standardisation, timed inside whole models: one process, interleaved.

    python benchmarks/stdconv_speed.py --models bit-r50x1 --batch-size 8 --rounds 5
    python benchmarks/stdconv_speed.py --models bit-r20x1-small --batch-size 128 --compile both

Every form computes the same function, w_hat = (w - mean(w)) / sqrt(var(w) + 1e-10) over each
output filter (variance biased), and only differs in how:

- `var_mean`: torch.var_mean, subtract, divide by sqrt (benchbench's StdConv2d before issue 18);
- `batch_norm`: one F.batch_norm call over the weight seen as (1, out_channels, fan_in), training
  statistics, no running buffers: timm's StdConv2d (with its eps replaced by BiT's 1e-10);
- `group_norm`: one F.group_norm call with one group per output filter, the same statistics
  (benchbench's StdConv2d since issue 18, resnetv2.standardise);
- `rsqrt`: var_mean over the flattened filter, then (w - mean) * rsqrt(var + eps);
- `two_pass`: mean, then the mean of the centred squares (plain sums, no Welford), then rsqrt;
- `function`: a torch.autograd.Function whose backward is written out:
  dw = rstd * (g - mean(g) - w_hat * mean(g * w_hat)).

For each model, mode (train, infer) and compile setting, the round r times every form once, in an
order that alternates (A B C ..., then ... C B A), so drift of a shared machine hits all alike. The
timing is benchbench.meters.throughput.measure_throughput, what `benchbench profile` times (train:
benchbench's AdamW step with clipping; infer: forward under no_grad), at a fixed batch. Compiled
runs call torch._dynamo.reset() first; compilation happens in the untimed warm-up.

It prints, for every form, its median img/s with the range over rounds, and the median (and range)
of the per-round ratios against `--baseline` (default var_mean). `--json` prints the raw figures.
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch
import torch.nn.functional as F

from benchbench.execution import Request, choose
from benchbench.meters.throughput import Inputs, Timing, measure_throughput
from benchbench.plugins import load_catalog
from benchbench.precision import resolve
from benchbench_plugins.models import resnetv2

EPS = 1e-10


def ws_var_mean(w: torch.Tensor) -> torch.Tensor:
    var, mean = torch.var_mean(w, dim=(1, 2, 3), keepdim=True, unbiased=False)
    return (w - mean) / torch.sqrt(var + EPS)


def ws_batch_norm(w: torch.Tensor) -> torch.Tensor:
    return F.batch_norm(w.reshape(1, w.shape[0], -1), None, None, training=True, momentum=0.0,
                        eps=EPS).reshape_as(w)


def ws_group_norm(w: torch.Tensor) -> torch.Tensor:
    return F.group_norm(w.reshape(1, w.shape[0], -1), w.shape[0], eps=EPS).reshape_as(w)


def ws_rsqrt(w: torch.Tensor) -> torch.Tensor:
    flat = w.reshape(w.shape[0], -1)
    var, mean = torch.var_mean(flat, dim=1, keepdim=True, unbiased=False)
    return ((flat - mean) * torch.rsqrt(var + EPS)).reshape_as(w)


def ws_two_pass(w: torch.Tensor) -> torch.Tensor:
    flat = w.reshape(w.shape[0], -1)
    centred = flat - flat.mean(dim=1, keepdim=True)
    return (centred * torch.rsqrt(centred.square().mean(dim=1, keepdim=True) + EPS)).reshape_as(w)


class _Standardise(torch.autograd.Function):
    @staticmethod
    def forward(ctx, w: torch.Tensor) -> torch.Tensor:
        flat = w.reshape(w.shape[0], -1)
        var, mean = torch.var_mean(flat, dim=1, keepdim=True, unbiased=False)
        rstd = torch.rsqrt(var + EPS)
        w_hat = (flat - mean) * rstd
        ctx.save_for_backward(w_hat, rstd)
        return w_hat.reshape_as(w)

    @staticmethod
    def backward(ctx, g: torch.Tensor) -> torch.Tensor:
        w_hat, rstd = ctx.saved_tensors
        flat = g.reshape(w_hat.shape)
        dw = rstd * (flat - flat.mean(dim=1, keepdim=True) - w_hat * (flat * w_hat).mean(dim=1, keepdim=True))
        return dw.reshape(g.shape)


def ws_function(w: torch.Tensor) -> torch.Tensor:
    return _Standardise.apply(w).reshape_as(w)


FORMS = {"var_mean": ws_var_mean, "batch_norm": ws_batch_norm, "group_norm": ws_group_norm,
         "rsqrt": ws_rsqrt, "two_pass": ws_two_pass, "function": ws_function}


def _conv_class(standardise):
    class Conv(resnetv2.StdConv2d):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return F.conv2d(x, standardise(self.weight), self.bias, self.stride, self.padding, self.dilation,
                            self.groups)
    return Conv


def use_form(model: torch.nn.Module, form: str) -> None:
    """Give every StdConv2d of `model` the standardisation `form` (the same parameters)."""
    cls = _conv_class(FORMS[form])
    for m in model.modules():
        if isinstance(m, resnetv2.StdConv2d):
            m.__class__ = cls


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", default=["bit-r50x1"])
    p.add_argument("--forms", nargs="+", default=list(FORMS), choices=list(FORMS))
    p.add_argument("--baseline", default="var_mean", choices=list(FORMS))
    p.add_argument("--mode", choices=["train", "infer", "both"], default="both")
    p.add_argument("--compile", choices=["off", "on", "both"], default="off")
    p.add_argument("--channels-last", choices=["off", "on", "both"], default="off",
                   help="the model and its inputs in channels-last; both: every form in either layout, "
                        "the ratios against the baseline form in the default layout")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    layouts = {"off": [False], "on": [True], "both": [False, True]}[args.channels_last]
    forms = [(f, cl) for f in dict.fromkeys([args.baseline, *args.forms]) for cl in layouts]
    baseline = (args.baseline, layouts[0])
    catalog = load_catalog(entry_points=False)
    modes = ["train", "infer"] if args.mode == "both" else [args.mode]
    compiles = {"off": [False], "on": [True], "both": [False, True]}[args.compile]
    rows = []
    for model_id in args.models:
        spec = catalog.models.get(model_id)
        # the quickstart's small models see Fashion-MNIST: 28 px, one channel
        image_size, in_chans = spec.default_resolution, spec.in_chans or (1 if spec.default_resolution < 64 else 3)
        torch.manual_seed(0)
        model = spec.build(num_classes=10, image_size=image_size, in_chans=in_chans)
        for compiled in compiles:
            for mode in modes:
                ips = {f: [] for f in forms}
                for r in range(args.rounds):
                    for form, channels_last in (forms if r % 2 == 0 else forms[::-1]):
                        use_form(model, form)
                        model.to(memory_format=torch.channels_last if channels_last else torch.contiguous_format)
                        if compiled:
                            torch._dynamo.reset()
                        ips[form, channels_last].append(measure_throughput(
                            model, Inputs(image_size, in_chans, 10, "cpu"), mode=mode,
                            precision=resolve("fp32", torch.device("cpu")), batch_size=args.batch_size,
                            execution=choose("cpu", Request(compile=compiled, channels_last=channels_last)),
                            timing=Timing(args.warmup, args.steps, 0.0)).img_per_s)
                base = ips[baseline]
                for form in forms:
                    ratios = [a / b for a, b in zip(ips[form], base)]
                    name = form[0] + (", channels-last" if form[1] else "")
                    rows.append({"model": model_id, "mode": mode, "compiled": compiled, "form": name,
                                 "img_per_s": ips[form], "median": statistics.median(ips[form]),
                                 "ratio_median": statistics.median(ratios), "ratios": ratios})
                    if not args.json:
                        print(f"{model_id:16s} {mode:5s} {'compiled' if compiled else 'eager':8s} {name:24s} "
                              f"{statistics.median(ips[form]):9.3f} img/s ({min(ips[form]):.3f}-{max(ips[form]):.3f})"
                              f"  x{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})"
                              f" vs {args.baseline}", flush=True)
    if args.json:
        print(json.dumps({"threads": torch.get_num_threads(), "batch_size": args.batch_size, "rows": rows},
                         indent=1))


if __name__ == "__main__":
    main()
