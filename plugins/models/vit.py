"""ViT variants (Dosovitskiy et al. 2020, Table 1; Ti and S from DeiT; small sizes of our own for
28-64 px images): ids `vit-<size><patch>`, e.g. `vit-b16` (alias "ViT-B/16"). The architecture is
in vision_transformer.py."""

from __future__ import annotations

from functools import partial

from benchbench import hookimpl
from benchbench.specs import ModelSpec
from benchbench_plugins.models.vision_transformer import PAPER_PATCHES, SMALL_PATCHES, SMALL_RESOLUTION, WIDTHS, create
from benchbench_plugins.models import vit_hf, vit_timm
from benchbench_plugins.models.vit_npz import LAYOUT


def _spec(width: str, patch: int, resolution: int) -> ModelSpec:
    w = WIDTHS[width]
    name = f"ViT-{width}/{patch}"
    return ModelSpec(
        id=f"vit-{width.lower()}{patch}",
        name=name,
        family="vit",
        build=partial(create, width, patch),
        default_resolution=resolution,
        aliases=(name,),
        resolution_multiple=patch,
        description=f"{w.depth} layers, hidden {w.hidden}, MLP {w.mlp}, {w.heads} heads, patch {patch}",
        npz_layout=LAYOUT,
        state_dict_layouts=(vit_timm.LAYOUT, vit_hf.LAYOUT),
        marker="o",
        color="tab:blue",
        # Measured on an H100 (results/h100: ViT-B/16, bf16, batch 256): eager 2498 img/s, 26.6 % of the
        # 989.5 TFLOP/s datasheet peak; compiled 3173 img/s, a step 0.21 shorter.
        eager_mfu=0.266,
        compile_gain=1 - 2498 / 3173,
        projection_family="vision-transformer",
    )


@hookimpl
def register_models(register) -> None:
    for width in ("Ti", "S", "B", "L", "H"):
        for patch in PAPER_PATCHES:
            register(_spec(width, patch, 224))
    for patch in SMALL_PATCHES:
        register(_spec("Mu", patch, SMALL_RESOLUTION))
