"""The model zoo page's rows: every registered model with its parameters and forward GMACs at its default resolution
(a parametric family, such as timm's architectures, has none: it is no one model).

Both numbers are taken on the meta device (shapes, no memory, no arithmetic) and remembered in
$BENCHBENCH_CACHE (else ~/.cache/benchbench) `params.json` and `macs.json`, as `benchbench list
models` does: the first build of the page counts ~100 models in under a minute, later ones read
the cache. MACs are torch.utils.flop_counter's count (benchbench.meters.flops.meta_macs, the
second of the two counters every run cross-checks), 1000 classes, 3 channels.
"""

from __future__ import annotations

from dataclasses import dataclass

from benchbench.registry import parametric_form


@dataclass(frozen=True)
class ZooRow:
    id: str
    name: str
    family: str
    params: int | None
    gmacs: float | None
    resolution: int
    plugin: str


def macs_at_default(spec) -> int | None:
    """Forward MACs of one image at the model's default resolution; None when it cannot be counted."""
    from benchbench.meters.flops import meta_macs

    try:
        return meta_macs(spec, num_classes=1000, image_size=spec.default_resolution, in_chans=3)
    except Exception:  # noqa: BLE001 - a third-party model the meta device cannot trace: shown as "-"
        return None


def zoo_rows(registry) -> list[ZooRow]:
    from benchbench.meters.cache import cache_dir, cached_per_model
    from benchbench.meters.params import cached_params_at_default

    # a parametric family (models written "<id>/<arg>") is no one model: no row
    specs = sorted((s for s in registry if parametric_form(s) is None), key=lambda s: s.id)
    params = cached_params_at_default(specs, cache_dir() / "params.json")
    macs = cached_per_model(specs, cache_dir() / "macs.json", macs_at_default)
    return [ZooRow(s.id, s.name, s.family, params[s.id], None if macs[s.id] is None else macs[s.id] / 1e9,
                   s.default_resolution, registry.plugin_of[s.id]) for s in specs]
