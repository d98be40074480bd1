"""`benchbench convert MODEL IN -o OUT.safetensors|OUT.pt [--resolution R] [--num-classes K] [--in-chans C] [--drop-head]
[--allow-nonfinite]`: any checkpoint benchbench reads (a file, or an hf-hub: id from the local cache),
loaded into MODEL and written in our format."""

from __future__ import annotations

import sys
from pathlib import Path

from benchbench.atomic import check_file_target, output_errors
from benchbench.cli.common import build_model, catalog


def add_parser(sub, parent) -> None:
    p = sub.add_parser("convert", parents=[parent],
                       help="load a checkpoint (any format benchbench reads) into a model and save it as ours")
    p.add_argument("model", metavar="MODEL", help="a model id or alias (benchbench list models)")
    p.add_argument("source", metavar="IN", help="a .safetensors, .pt/.pth/.bin or .npz file (benchbench's, timm's, "
                   "torchvision's, transformers', the paper's), or hf-hub:<org>/<name>[@<revision>] from the local "
                   "Hugging Face cache")
    p.add_argument("-o", "--output", required=True, metavar="OUT", help="OUT.safetensors or OUT.pt")
    p.add_argument("--resolution", type=int, metavar="R", help="build the model at this resolution (position "
                   "embeddings are interpolated); default: the model's default")
    p.add_argument("--num-classes", type=int, default=1000, metavar="K", help="classes of the checkpoint's head (default 1000)")
    p.add_argument("--in-chans", type=int, metavar="C", help="input channels of the checkpoint's model (1 for a "
                   "model trained on grey images); default: the model's fixed channels, else 3")
    p.add_argument("--drop-head", action="store_true",
                   help="keep a fresh zero head of --num-classes instead of the checkpoint's head")
    p.add_argument("--allow-nonfinite", action="store_true",
                   help="accept NaN or infinite weights (refused otherwise), and mark the output so that "
                        "loading it accepts them too")
    p.set_defaults(func=run)


def run(args) -> int:
    from benchbench.checkpoints import NONFINITE_META, SAVE_SUFFIXES, load_weights, save_checkpoint
    from benchbench.errors import BenchError

    if Path(args.output).suffix.lower() not in SAVE_SUFFIXES:
        raise BenchError(f"convert: -o {args.output}: unknown suffix; allowed: {', '.join(SAVE_SUFFIXES)}")
    check_file_target(Path(args.output))  # before the work: a missing folder, a directory in the way
    cat = catalog(args)
    spec = cat.models.get(args.model)
    resolution = args.resolution or spec.default_resolution
    model = build_model(spec, "convert", num_classes=args.num_classes, image_size=resolution,
                        in_chans=args.in_chans or spec.in_chans or 3)
    report = load_weights(model, args.source, spec, drop_head=args.drop_head, allow_nonfinite=args.allow_nonfinite,
                          candidates=lambda: list(cat.models))
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    marked = {NONFINITE_META: True} if args.allow_nonfinite else {}
    provenance = report.provenance.to_json() if report.provenance else {}
    preprocessing = {"preprocessing": report.preprocessing.to_json()} if report.preprocessing else {}
    with output_errors(Path(args.output)):  # written whole (a temporary file renamed); a full disk is one line
        save_checkpoint(model, args.output, model=spec.id, resolution=resolution, num_classes=args.num_classes,
                        source=str(args.source), provenance=provenance, **preprocessing, **marked)
    resized = ", position embeddings resized" if report.pos_embed_resized else ""
    dropped = f", head dropped ({len(report.dropped_keys)} tensors)" if report.head_dropped else ""
    sha = f", sha256 {report.provenance.sha256[:12]}" if report.provenance else ""
    print(f"{spec.id} at {resolution} px: {report.keys_loaded} tensors from {report.source}{sha}{resized}{dropped}"
          f" -> {args.output}", file=sys.stderr)
    for note in report.notes:
        print(f"note: {note}", file=sys.stderr)
    return 0
