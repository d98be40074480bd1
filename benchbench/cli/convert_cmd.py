"""`benchbench convert MODEL IN -o OUT.safetensors|OUT.pt [--resolution R] [--num-classes K] [--in-chans C] [--drop-head]
[--allow-nonfinite]`: any checkpoint benchbench reads (a file, or an hf-hub: id from the local cache),
loaded into MODEL and written in our format, its folder made where needed. The model takes the
checkpoint's input channels unless --in-chans asks for others, which adapts its first convolution."""

from __future__ import annotations

import sys
from pathlib import Path

from benchbench.store.atomic import output_errors
from benchbench.cli.common import MAX_CLASSES, MAX_RESOLUTION, build_model, catalog, check_model_size
from benchbench.errors import BenchError

# Input channels: 1 grey, 3 RGB, 4 RGBA, 13 for Sentinel-2, a few hundred for a hyperspectral imager (AVIRIS:
# 224 bands). More is a typo: torch would try to allocate the first convolution (ViT-Mu/7 at 2**31: 27 TB) or
# overflow in C++ (2**64 and up), and ViT-H/14's patch embedding at 1,024 channels already holds 257M weights.
MAX_IN_CHANS = 1024
IN_CHANS_RANGE = f"1 to {MAX_IN_CHANS:,}: 1 grey, 3 RGB, up to a few hundred spectral bands"


def add_parser(sub, parent) -> None:
    p = sub.add_parser("convert", parents=[parent],
                       help="load a checkpoint (any format benchbench reads) into a model and save it as ours")
    p.add_argument("model", metavar="MODEL", help="a model id or alias (benchbench list models)")
    p.add_argument("source", metavar="IN", help="a .safetensors, .pt/.pth/.bin or .npz file (benchbench's, timm's, "
                   "torchvision's, transformers', the paper's), or hf-hub:<org>/<name>[@<revision>] from the local "
                   "Hugging Face cache")
    p.add_argument("-o", "--output", required=True, metavar="OUT", help="OUT.safetensors or OUT.pt (its folder is "
                   "made where it does not exist)")
    p.add_argument("--resolution", type=int, metavar="R", help="build the model at this resolution (position "
                   f"embeddings are interpolated); default: the model's default; 1 to {MAX_RESOLUTION:,}")
    p.add_argument("--num-classes", type=int, default=1000, metavar="K",
                   help=f"classes of the checkpoint's head (default 1000; 1 to {MAX_CLASSES:,})")
    p.add_argument("--in-chans", type=int, metavar="C", help="input channels of the model to write: the "
                   "checkpoint's first convolution is adapted where it takes others (to 1: summed over its "
                   "channels, as timm's adapt_input_conv); default: the model's fixed channels, else the "
                   f"checkpoint's; {IN_CHANS_RANGE}")
    p.add_argument("--drop-head", action="store_true",
                   help="keep a fresh zero head of --num-classes instead of the checkpoint's head")
    p.add_argument("--allow-nonfinite", action="store_true",
                   help="accept NaN or infinite weights (refused otherwise), and mark the output so that "
                        "loading it accepts them too")
    p.set_defaults(func=run)


def run(args) -> int:
    from benchbench.weights.checkpoints import NONFINITE_META, SAVE_SUFFIXES, checkpoint_in_chans, load_weights, save_checkpoint

    out = Path(args.output)
    if out.suffix.lower() not in SAVE_SUFFIXES:
        raise BenchError(f"convert: -o {args.output}: unknown suffix; allowed: {', '.join(SAVE_SUFFIXES)}")
    check_in_chans(args.in_chans, "convert: ")
    _check_target(out)  # before the work: a file or a non-folder in the way
    cat = catalog(args)
    spec = cat.models.get(args.model)
    resolution = spec.default_resolution if args.resolution is None else args.resolution
    # every size that reaches torch, before anything is read or built (reading a checkpoint's channels
    # builds the model on the meta device at these sizes)
    check_model_size(resolution, args.num_classes, "convert")
    in_chans = args.in_chans or spec.in_chans or checkpoint_in_chans(
        args.source, spec, num_classes=args.num_classes, image_size=resolution) or 3
    model = build_model(spec, "convert", num_classes=args.num_classes, image_size=resolution, in_chans=in_chans)
    report = load_weights(model, args.source, spec, drop_head=args.drop_head, allow_nonfinite=args.allow_nonfinite,
                          candidates=lambda: list(cat.models), adapt_in_chans=args.in_chans is not None)
    if report.head_dropped:  # a fresh zero head of --num-classes, as --help says (not the one built at random)
        model.reset_head(args.num_classes)
    marked = {NONFINITE_META: True} if args.allow_nonfinite else {}
    provenance = report.provenance.to_json() if report.provenance else {}
    pre = _for_channels(report.preprocessing, in_chans)
    preprocessing = {"preprocessing": pre.to_json()} if pre else {}
    with output_errors(out):  # written whole (a temporary file renamed); a full disk is one line
        out.parent.mkdir(parents=True, exist_ok=True)
        save_checkpoint(model, out, model=spec.id, resolution=resolution, num_classes=args.num_classes,
                        in_chans=in_chans, source=str(args.source), provenance=provenance, **preprocessing, **marked)
    resized = ", position embeddings resized" if report.pos_embed_resized else ""
    dropped = f", head dropped ({len(report.dropped_keys)} tensors)" if report.head_dropped else ""
    sha = f", sha256 {report.provenance.sha256[:12]}" if report.provenance else ""
    print(f"{spec.id} at {resolution} px, {in_chans} input channel{'' if in_chans == 1 else 's'}: "
          f"{report.keys_loaded} tensors from {report.source}{sha}{resized}{dropped} -> {args.output}", file=sys.stderr)
    for note in report.notes:
        print(f"note: {note}", file=sys.stderr)
    if pre is not report.preprocessing:
        print(f"note: its evaluation transform's mean and std, one per channel of {len(report.preprocessing.mean)}, "
              f"are averaged into one for the {in_chans}-channel model (exact where the channels share them)",
              file=sys.stderr)
    return 0


def check_in_chans(value: int | None, where: str = "") -> None:
    """Refuses --in-chans outside 1..MAX_IN_CHANS in one line, before a model is built (None: not given)."""
    if value is not None and not 1 <= value <= MAX_IN_CHANS:
        raise BenchError(f"{where}--in-chans {str(value)[:40]}: expected a whole number of input channels from "
                         f"{IN_CHANS_RANGE}; give one in that range")


def _check_target(path: Path) -> None:
    """OutputError unless `path` can be a file: not a directory, and its folder a folder or not there
    yet (made when the file is written) under a folder."""
    from benchbench.store.atomic import OutputError

    if path.is_dir():
        raise OutputError(f"-o {path}: is a directory; name a file, or move the directory away")
    folder = path.parent
    while not folder.exists() and folder != folder.parent and not folder.is_symlink():
        folder = folder.parent
    if not folder.is_dir():
        raise OutputError(f"-o {path}: {folder} is not a folder; name a file under a folder")


def _for_channels(pre, in_chans: int):
    """A transform for a model of `in_chans` channels: a 1-channel model whose transform names 3
    (a checkpoint adapted by --in-chans 1) takes their averages; else `pre` itself."""
    if pre is None or in_chans != 1 or len(pre.mean) == 1:
        return pre
    from dataclasses import replace

    return replace(pre, mean=(sum(pre.mean) / len(pre.mean),), std=(sum(pre.std) / len(pre.std),),
                   source=f"{pre.source}, mean and std averaged over its {len(pre.mean)} channels")
