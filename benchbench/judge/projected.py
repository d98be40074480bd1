"""A run's cells projected onto a device as `benchbench project RUN --to DEVICE` projects their records
(benchbench.projection.source): for reference rows that name a `device` (on `projected_device_days`), which
`verify` and the site's verification page judge by the projection's 80 % interval, and for `table --layout
compute --project-to`'s columns."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

# (run label, a verify cell: a frame row as a dict, device id) -> benchbench.projection.source.projected's
# dict, or why the cell cannot be projected, in words
Projector = Callable[[str, Mapping[str, Any], str], "dict | str"]


def projector(catalog, runs: Mapping[str, tuple[Sequence, Mapping | None]], devices: Mapping | None = None
              ) -> Projector:
    """A Projector over `runs` ({run label: (its records, its env.json)}): a cell is found by its run and
    `key`; `catalog` the plugins' models and datasets (a projection counts the model's activations); a
    device by its catalog id or one of `devices` (a --devices file's, benchbench.projection.catalog), which
    also describe the devices the runs measured on where the datasheet table does not know them."""
    from benchbench.projection.catalog import resolve
    from benchbench.projection.source import images_of, projected, record_source

    by_key = {label: ({r.key: r for r in records}, env) for label, (records, env) in runs.items()}

    def project(label: str, cell: Mapping[str, Any], device: str) -> dict | str:
        records, env = by_key.get(label, ({}, None))
        record = records.get(cell.get("key"))
        if record is None:
            return "its record is not in the run"
        source = record_source(record, dict(env or {}), catalog)
        if isinstance(source, str):
            return source
        images = images_of(record)
        if not images:
            return "it records no training images (pretrain_images_seen) to project device-days of"
        return projected(source, resolve(device, devices), images, devices)

    return project
