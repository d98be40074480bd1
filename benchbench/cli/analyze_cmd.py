"""`benchbench analyze MODEL... [--checkpoint FILE | --run RUN_DIR | --random] -o DIR`: the paper's look
inside a ViT or hybrid (Figures 6, 7, 11) as figures, JSON and a markdown table."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from benchbench.store.atomic import folder, write_text
from benchbench.cli.common import build_model, catalog
from benchbench.errors import BenchError

FORMATS = ("png", "svg", "pdf")
DATA_ENV = "BENCHBENCH_DATA"


def add_parser(sub, parent) -> None:
    p = sub.add_parser("analyze", parents=[parent],
                       help="inside a ViT or hybrid: attention distance, position embeddings, filters, rollout")
    p.add_argument("models", nargs="+", metavar="MODEL", help="model ids (ViTs and hybrids)")
    p.add_argument("--checkpoint", action="append", default=[], metavar="FILE",
                   help="weights to analyse (.safetensors, .pt/.pth/.bin, .npz, or hf-hub:<org>/<name>[@<revision>] "
                        "from the local Hugging Face cache; repeatable)")
    p.add_argument("--run", action="append", default=[], metavar="RUN_DIR",
                   help="analyse every checkpoint of MODEL a run saved (RUN_DIR/checkpoints; repeatable)")
    p.add_argument("--random", action="store_true", help="also the model at random init (the default without weights)")
    p.add_argument("--dataset", help="sample images and input channels (default: the checkpoint's dataset)")
    p.add_argument("--resolution", type=int, default=0, help="input px (default: the checkpoint's, else the model's)")
    p.add_argument("--images", type=int, default=6, help="sample images for the rollout maps (default 6)")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="where figures, analysis.json and analysis.md go")
    p.add_argument("--format", choices=FORMATS, default="png", help="figure format (default png)")
    p.add_argument("--data-root", metavar="DIR", default=os.environ.get(DATA_ENV),
                   help=f"where datasets are looked for first (default: ${DATA_ENV})")
    p.set_defaults(func=run)


@dataclass(frozen=True)
class Source:
    model: str
    label: str
    checkpoint: Path | None  # a file, or an hf-hub: id (kept as given)
    meta: dict


def _meta(path: Path) -> dict:
    """A benchbench checkpoint's metadata ({} for other files; unreadable ones are reported when loaded)."""
    from benchbench.weights.checkpoints import checkpoint_meta

    return checkpoint_meta(path)


def _label(model: str, path: Path, meta: dict) -> str:
    if meta.get("protocol") or meta.get("dataset"):  # written by the protocol that trained it
        return f"{model} {meta.get('protocol') or 'trained'} on {meta.get('dataset', '?')}"
    return f"{model} {path.stem}"


def sources(args, model_ids: list[str]) -> list[Source]:
    out = []
    for model in model_ids:
        for f in args.checkpoint:
            path = Path(f)
            if f.startswith("hf-hub:"):
                out.append(Source(model, f"{model} {f}", path, {}))
                continue
            if not path.is_file():
                raise BenchError(f"analyze: --checkpoint {f}: no such file")
            meta = _meta(path)
            out.append(Source(model, _label(model, path, meta), path, meta))
        for run_dir in args.run:
            folder = Path(run_dir) / "checkpoints"
            found = [p for p in sorted(folder.glob("*.pt")) if _meta(p).get("model") == model]
            if not found:
                have = sorted(p.name for p in folder.glob("*.pt")) if folder.is_dir() else []
                raise BenchError(f"analyze: --run {run_dir}: no checkpoint of model {model!r} in {folder}"
                                 + (f"; there are: {', '.join(have)}" if have else ""))
            out += [Source(model, _label(model, p, _meta(p)), p, _meta(p)) for p in found]
        if args.random or not (args.checkpoint or args.run):
            out.append(Source(model, f"{model} random init", None, {}))
    return out


def _slug(label: str) -> str:
    return re.sub(r"[^a-z0-9.+-]+", "-", label.lower()).strip("-")


def dataset_of(cat, source: Source, args, fallback: str | None) -> str:
    """--dataset, else the checkpoint's, else (random init) the first checkpoint's of this command."""
    dataset_id = args.dataset or source.meta.get("dataset") or fallback
    if not dataset_id:
        raise BenchError(f"analyze: {source.label}: say which dataset's images to use with --dataset "
                         f"(allowed: {', '.join(d.id for d in cat.datasets)})")
    return cat.datasets.resolve(dataset_id)


def _build(cat, source: Source, args, dataset_id: str):
    """The model with the source's weights, its dataset spec and resolution."""
    import torch

    from benchbench.weights.checkpoints import load_weights
    from benchbench.specs import PatchTokenModel

    spec = cat.models.get(source.model)
    dataset = cat.datasets.get(dataset_id)
    resolution = args.resolution or source.meta.get("resolution") or spec.default_resolution
    classes = source.meta.get("num_classes") or dataset.num_classes
    torch.manual_seed(0)
    model = build_model(spec, f"analyze {source.label}", num_classes=classes, image_size=resolution,
                        in_chans=spec.in_chans or dataset.in_chans)
    if not isinstance(model, PatchTokenModel):
        raise BenchError(f"analyze: model {source.model!r} has no patch tokens; analyze takes ViTs and hybrids "
                         "(a model implementing benchbench.specs.PatchTokenModel)")
    if source.checkpoint is not None:
        load_weights(model, str(source.checkpoint), spec, candidates=lambda: list(cat.models))
    return model, dataset, resolution


def _samples(dataset, resolution: int, in_chans: int, n: int, root):
    """The first image of each class in the test split (then more, up to n), as the model takes them."""
    import torch

    from benchbench.specs import DataOptions

    data = dataset.load("test", DataOptions(root=Path(root) if root else None, image_size=resolution, in_chans=in_chans))
    picked, seen = [], set()
    for i in range(min(len(data), 2000)):
        x, y = data[i]
        if int(y) not in seen or len(seen) >= dataset.num_classes:
            seen.add(int(y))
            picked.append((x, int(y)))
        if len(picked) >= n:
            break
    return torch.stack([x for x, _ in picked]), [y for _, y in picked]


def _table(results: list[dict]) -> str:
    from tabulate import tabulate

    rows = []
    for r in results:
        for layer, d in enumerate(r["attention_distance_px"], 1):
            rows.append([r["label"], layer, len(d), f"{min(d):.2f}", f"{sum(d) / len(d):.2f}", f"{max(d):.2f}"])
    head = ["Weights", "Layer", "Heads", "Min distance (px)", "Mean distance (px)", "Max distance (px)"]
    summary = [[r["label"], f"{r['resolution']} px, {r['grid']}x{r['grid']} patches of {r['patch_size']} px",
                f"{r['uniform_distance_px']:.2f}", f"{r['position_similarity_neighbour']:.3f}",
                f"{r['position_similarity_far']:.3f}",
                "-" if r["filter_variance_explained"] is None else
                f"{100 * sum(r['filter_variance_explained'][:3]):.1f}"] for r in results]
    return ("Mean attention distance per layer (over heads; each head's distance averaged over query patches "
            "and sample images):\n\n" + tabulate(rows, head, tablefmt="github", disable_numparse=True)
            + "\n\nPer weights: the distance uniform attention would give; mean cosine similarity of position "
            "embeddings between grid neighbours and between patches 2+ apart; variance of the patch filters in "
            "the first 3 principal components:\n\n"
            + tabulate(summary, ["Weights", "Input", "Uniform (px)", "Pos. sim. neighbours", "Pos. sim. far",
                                 "Filters PC1-3 (%)"], tablefmt="github", disable_numparse=True) + "\n")


def run(args) -> int:
    import torch

    from benchbench.report import analysis

    from benchbench.report import analysis_figures as figures
    cat = catalog(args)
    model_ids = [cat.models.resolve(m) for m in args.models]
    out = folder(args.output)
    results, distances = [], {}
    todo = sources(args, model_ids)
    fallback = next((s.meta["dataset"] for s in todo if s.meta.get("dataset")), None)
    datasets = [dataset_of(cat, s, args, fallback) for s in todo]  # every error before any work
    for source, dataset_id in zip(todo, datasets):
        model, dataset, resolution = _build(cat, source, args, dataset_id)
        in_chans = cat.models.get(source.model).in_chans or dataset.in_chans
        images, labels = _samples(dataset, resolution, in_chans, args.images, args.data_root)
        numbers = analysis.analyze(model, images)
        grid, patch = model.grid, model.patch_size
        dist = numbers["attention_distance_px"]
        sim = numbers["position_similarity"]
        far = analysis.patch_distances(grid, 1)
        slug = _slug(source.label)
        files = [figures.position_similarity(sim.numpy(), grid, out / f"position-similarity--{slug}.{args.format}",
                                             f"Position embedding similarity: {source.label}"),
                 figures.rollout(images.numpy(), numbers["rollout"].numpy(), out / f"rollout--{slug}.{args.format}",
                                 [str(y) for y in labels], f"Attention rollout: {source.label}")]
        if numbers["filter_components"] is not None:
            files.append(figures.filter_components(numbers["filter_components"].numpy(),
                                                   numbers["filter_variance_explained"].numpy(),
                                                   out / f"filters--{slug}.{args.format}",
                                                   f"Patch-embedding filters, principal components: {source.label}"))
        distances[source.label] = dist.numpy()
        uniform = torch.full((1, 1, 1 + grid * grid, 1 + grid * grid), 1.0)
        results.append({
            "label": source.label, "model": source.model, "checkpoint": str(source.checkpoint or ""),
            "dataset": dataset.id, "resolution": resolution, "grid": grid, "patch_size": patch,
            "attention_distance_px": dist.tolist(),
            "uniform_distance_px": float(analysis.mean_attention_distance(uniform, grid, patch)[0]),
            "position_similarity": sim.tolist(),
            "position_similarity_neighbour": float(sim[far == 1].mean()),
            "position_similarity_far": float(sim[far >= 2].mean()) if (far >= 2).any() else float("nan"),
            "filter_variance_explained": (None if numbers["filter_variance_explained"] is None
                                          else numbers["filter_variance_explained"].tolist()),
            "rollout": numbers["rollout"].tolist(), "rollout_labels": labels,
            "figures": [p.name for p in files],
        })
    figures.attention_distance(distances, out / f"attention-distance.{args.format}")
    write_text(out / "analysis.json", json.dumps({"command": " ".join(args.command_line), "results": results},
                                                 indent=1) + "\n")
    write_text(out / "analysis.md", _table(results))
    print(_table(results))
    print(f"figures, analysis.json and analysis.md in {out}")
    return 0
