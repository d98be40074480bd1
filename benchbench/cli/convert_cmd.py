"""`benchbench convert MODEL IN.npz|IN.pt -o OUT.pt [--resolution R] [--num-classes K] [--drop-head]
[--allow-nonfinite]`."""

from __future__ import annotations

import sys

from benchbench.checkpoints import NONFINITE_META, load_checkpoint, save_checkpoint
from benchbench.cli.common import catalog


def add_parser(sub, parent) -> None:
    p = sub.add_parser("convert", parents=[parent],
                       help="load a checkpoint (ours, or the paper's .npz) into a model and save it as ours")
    p.add_argument("model", metavar="MODEL", help="a model id or alias (benchbench list models)")
    p.add_argument("source", metavar="IN", help="a .npz of the paper's code release, or a .pt/.pth")
    p.add_argument("-o", "--output", required=True, metavar="OUT.pt")
    p.add_argument("--resolution", type=int, help="build the model at this resolution (position "
                   "embeddings are interpolated); default: the model's default")
    p.add_argument("--num-classes", type=int, default=1000, help="classes of the checkpoint's head (default 1000)")
    p.add_argument("--drop-head", action="store_true",
                   help="keep a fresh zero head of --num-classes instead of the checkpoint's head")
    p.add_argument("--allow-nonfinite", action="store_true",
                   help="accept NaN or infinite weights (refused otherwise), and mark the output so that "
                        "loading it accepts them too")
    p.set_defaults(func=run)


def run(args) -> int:
    spec = catalog(args).models.get(args.model)
    resolution = args.resolution or spec.default_resolution
    model = spec.build(num_classes=args.num_classes, image_size=resolution, in_chans=3)
    report = load_checkpoint(model, args.source, drop_head=args.drop_head, npz_layout=spec.npz_layout,
                             allow_nonfinite=args.allow_nonfinite)
    marked = {NONFINITE_META: True} if args.allow_nonfinite else {}
    save_checkpoint(model, args.output, model=spec.id, resolution=resolution, num_classes=args.num_classes,
                    source=str(args.source), **marked)
    resized = ", position embeddings resized" if report.pos_embed_resized else ""
    dropped = f", head dropped ({len(report.dropped_keys)} tensors)" if report.head_dropped else ""
    print(f"{spec.id} at {resolution} px: {report.keys_loaded} tensors from {report.source}{resized}{dropped}"
          f" -> {args.output}", file=sys.stderr)
    return 0
