"""A plain dict of specs per kind, filled by plugins' `register` callbacks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, Iterator, TypeVar

from benchbench.errors import BenchError, UnknownIdError

T = TypeVar("T")


class DuplicateIdError(BenchError):
    pass


@dataclass
class Registry(Generic[T]):
    """Specs of one kind (model, dataset, protocol) by id, with aliases and owning plugin.

    Lookups are case-insensitive and accept aliases (the paper's spelling, e.g. "ViT-B/16").
    """

    kind: str
    specs: dict[str, T] = field(default_factory=dict)
    plugin_of: dict[str, str] = field(default_factory=dict)
    _names: dict[str, str] = field(default_factory=dict)  # lower-cased id or alias -> id

    def add(self, spec: T, plugin: str) -> None:
        spec_id = spec.id  # type: ignore[attr-defined]
        if not spec_id or spec_id != spec_id.strip():
            raise BenchError(f"plugin {plugin!r} registered a {self.kind} with an empty or padded id {spec_id!r}")
        for name in (spec_id, *getattr(spec, "aliases", ())):
            owner_id = self._names.get(name.lower())
            if owner_id is not None:
                raise DuplicateIdError(
                    f"{self.kind} id {name!r} is registered twice: by plugin "
                    f"{self.plugin_of[owner_id]!r} ({owner_id}) and by plugin {plugin!r} ({spec_id}); "
                    "rename one, or uninstall one of the plugins"
                )
        self.specs[spec_id] = spec
        self.plugin_of[spec_id] = plugin
        for name in (spec_id, *getattr(spec, "aliases", ())):
            self._names[name.lower()] = spec_id

    def resolve(self, name: str) -> str:
        """The canonical id for an id or alias; UnknownIdError with the nearest match otherwise."""
        spec_id = self._names.get(name.strip().lower())
        if spec_id is None:
            raise UnknownIdError(self.kind, name, self.specs)
        return spec_id

    def get(self, name: str) -> T:
        return self.specs[self.resolve(name)]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.strip().lower() in self._names

    def __iter__(self) -> Iterator[T]:
        return iter(self.specs.values())

    def __len__(self) -> int:
        return len(self.specs)
