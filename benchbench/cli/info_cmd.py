"""`benchbench info MODEL [--resolution R] [--num-classes K] [--json]`: params and FLOPs of one model, MACs in
three conventions (the paper's matmul-like work; timm's: fvcore's, norms and pooling too; XLA's:
convolutions without their taps over padding), and the bytes a forward pass moves per operator class."""

from __future__ import annotations

import json

from benchbench.cli.common import catalog


def add_parser(sub, parent) -> None:
    p = sub.add_parser("info", parents=[parent], help="parameters and forward MACs/FLOPs of one model")
    p.add_argument("model", metavar="MODEL", help="a model id or alias (benchbench list models)")
    p.add_argument("--resolution", type=int, metavar="R", help="input resolution (default: the model's default)")
    p.add_argument("--num-classes", type=int, default=1000, metavar="K", help="classes of the head (default 1000)")
    p.add_argument("--in-chans", type=int, default=3, metavar="C", help="input channels (default 3)")
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.set_defaults(func=run)


def run(args) -> int:
    from benchbench.meters.bytes_moved import count_bytes
    from benchbench.meters.flops import build_for_counting, count_macs, with_inference_form
    from benchbench.meters.params import count_params

    spec = catalog(args).models.get(args.model)
    resolution = args.resolution or spec.default_resolution
    try:
        model, meta = build_for_counting(spec, num_classes=args.num_classes, image_size=resolution,
                                         in_chans=args.in_chans)
    except ValueError as exc:  # e.g. a resolution the patch size does not divide
        from benchbench.errors import BenchError

        raise BenchError(f"{spec.id}: {exc}") from None
    count = with_inference_form(count_macs(model, resolution, args.in_chans, meta_model=meta), spec, model, resolution,
                                args.in_chans)
    moved = count_bytes(meta, resolution, args.in_chans)  # on the meta model: shapes only, no memory
    info = {
        "id": spec.id, "name": spec.name, "family": spec.family, "resolution": resolution,
        "num_classes": args.num_classes, "params": count_params(model),
        "macs": count.macs, "gmacs": count.gmacs, "gflops": count.gflops,
        "macs_second_count": count.second_macs, "flops_status": count.status,
        "macs_by_operator": count.by_operator,
        # timm's convention (its benchmark CSVs): fvcore's default handles, attention unfused (docs/compute.md)
        "macs_fvcore": count.macs_fvcore, "gmacs_fvcore": count.gmacs_fvcore,
        "macs_fvcore_terms": count.fvcore_terms,
        # XLA's convention (the paper's JAX/TPU figures): no convolution tap over padding (docs/compute.md)
        "macs_xla": count.macs_xla, "gmacs_xla": count.gmacs_xla, "macs_xla_padding": count.padding_macs,
        # the inference form (branches and norms fused: timm's reparameterize_model), where the model has one
        **{k: v for k, v in count.metrics().items() if k.endswith("_reparameterized")},
        # bytes read and written per operator class, eager and unfused, at the dtypes as built (docs/compute.md)
        "bytes_moved_by_class": moved.by_class, "bytes_moved": moved.total, "weight_bytes": moved.weight_bytes,
    }
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    print(f"{spec.name} ({spec.id}) at {resolution} px, {args.num_classes} classes")
    print(f"  params       {info['params']:,}  ({info['params'] / 1e6:.2f}M)")
    print(f"  forward      {count.gmacs:.4g} GMACs = {count.gflops:.4g} GFLOPs per image")
    print(f"  by operator  " + ", ".join(f"{op} {n / 1e9:.4g}" for op, n in count.by_operator.items()) + " GMACs")
    dtype = next((str(p.dtype) for p in meta.parameters() if p.is_floating_point()), "float32")
    print(f"  bytes moved  {moved.total / 1e6:.4g} MB per image, eager and unfused ({dtype.removeprefix('torch.')}): "
          + ", ".join(f"{c} {n / 1e6:.4g}" for c, n in moved.by_class.items())
          + f" MB; weights {moved.weight_bytes / 1e6:.4g} MB")
    print(f"  fvcore       {count.gmacs_fvcore:.4g} GMACs in timm's convention (norms, pooling, upsampling too: "
          + (", ".join(f"{op} {n / 1e9:.4g}" for op, n in count.fvcore_terms.items()) or "none here") + ")")
    saved = f"{count.padding_macs / 1e9:.4g} GMACs of taps over padding left out" if count.padding_macs else "no padding"
    print(f"  xla          {count.gmacs_xla:.4g} GMACs in XLA's convention (convolutions: {saved})")
    if count.inference is not None and count.inference != (count.macs_fvcore, info["params"]):  # something fused
        fused_params = count.inference[1]
        print(f"  inference    {count.inference[0] / 1e9:.4g} GMACs in timm's convention, {fused_params:,} params "
              f"({fused_params / 1e6:.2f}M), on its inference form (branches and norms fused: reparameterized)")
    print(f"  flops_status {count.status}")
    test = getattr(spec, "test_preprocessing", None)  # a timm tag's test size: where timm's CSVs count it
    if args.resolution is None and test is not None and test.crop_size != resolution:
        print(f"  (timm's results and benchmark CSVs count it at its test size, {test.crop_size} px: "
              f"benchbench info {spec.id} --resolution {test.crop_size})")
    return 0
