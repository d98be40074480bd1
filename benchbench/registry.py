"""A plain dict of specs per kind, filled by plugins' `register` callbacks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, Iterator, TypeVar

from benchbench.errors import BenchError, UnknownIdError

T = TypeVar("T")


class DuplicateIdError(BenchError):
    pass


def _sep(spec) -> str:
    """What joins a parametric spec's id and its argument: the spec's `bind_separator`, else ":"."""
    return getattr(spec, "bind_separator", ":")


def parametric_form(spec) -> str | None:
    """How a parametric spec's ids are written, "<id><sep><arg>" (e.g. "imagefolder:<arg>"); None for
    an ordinary spec."""
    return f"{spec.id}{_sep(spec)}<arg>" if getattr(spec, "bind", None) is not None else None


@dataclass
class Registry(Generic[T]):
    """Specs of one kind (model, dataset, protocol) by id, with aliases and owning plugin.

    Lookups are case-insensitive and accept aliases (the paper's spelling, e.g. "ViT-B/16").
    A spec with a `bind` callable is parametric: "<id><sep><arg>" names the spec `bind(arg)` returns,
    where <sep> is the spec's `bind_separator` (":" unless it says otherwise: datasets
    "imagefolder:/data/pets", models "timm/resnet50"); its id keeps `arg` as given (paths are
    case-sensitive), and it is bound once and remembered, with the plugin of its parametric spec.
    """

    kind: str
    specs: dict[str, T] = field(default_factory=dict)
    plugin_of: dict[str, str] = field(default_factory=dict)
    _names: dict[str, str] = field(default_factory=dict)  # lower-cased id or alias -> id
    bound: dict[str, T] = field(default_factory=dict)  # "<id>:<arg>" -> the spec bound to arg

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
        """The canonical id for an id or alias; UnknownIdError with the nearest match otherwise.

        A parametric name is bound here (so a missing folder fails when a suite is validated) and
        resolves to "<id><sep><arg>".
        """
        spec_id = self._names.get(name.strip().lower())
        if spec_id is not None:
            if getattr(self.specs[spec_id], "bind", None) is not None:
                raise BenchError(f"{self.kind} {spec_id!r} takes an argument: write "
                                 f"{parametric_form(self.specs[spec_id])} ({self.specs[spec_id].description})")
            return spec_id
        parametric = self._parametric(name)
        if parametric is None:
            raise UnknownIdError(self.kind, name, self.specs)
        return self._bind(*parametric).id  # type: ignore[attr-defined]

    def _parametric(self, name: str) -> tuple[str, str] | None:
        """(base id, argument) when `name` is "<id><sep><arg>" for a parametric spec (by its id or an
        alias) whose separator is <sep>; else None."""
        name = name.strip()
        for base_id, spec in self.specs.items():
            if getattr(spec, "bind", None) is None:
                continue
            for prefix in (f"{n}{_sep(spec)}" for n in (base_id, *getattr(spec, "aliases", ()))):
                if name.lower().startswith(prefix.lower()):
                    return base_id, name[len(prefix):]
        return None

    def _bind(self, base_id: str, arg: str) -> T:
        sep = _sep(self.specs[base_id])
        key = f"{base_id}{sep}{arg}"
        if key not in self.bound:
            if not arg:
                raise BenchError(f"{self.kind} {base_id!r}: empty argument; write {base_id}{sep}<arg>")
            spec = self.specs[base_id].bind(arg)  # type: ignore[attr-defined]
            if spec.id != key:
                raise BenchError(f"plugin {self.plugin_of[base_id]!r}: {base_id}.bind({arg!r}) returned id "
                                 f"{spec.id!r}, expected {key!r}")
            self.bound[key] = spec
            self.plugin_of[key] = self.plugin_of[base_id]
        return self.bound[key]

    def claimed(self, name: str) -> str | None:
        """The id of the spec a reader would take `name` for: an id or alias (case-insensitive), a spec's
        display name, or "<id><sep><arg>" of a parametric spec (not bound: nothing is imported or checked);
        None where `name` is no spec's. What a name given elsewhere (a suite's contender) must not be."""
        lowered = name.strip().lower()
        spec_id = self._names.get(lowered)
        if spec_id is not None:
            return spec_id
        for spec_id, spec in self.specs.items():
            if str(getattr(spec, "name", "")).strip().lower() == lowered:
                return spec_id
        parametric = self._parametric(name)
        return None if parametric is None else f"{parametric[0]}{_sep(self.specs[parametric[0]])}{parametric[1]}"

    def get(self, name: str) -> T:
        spec_id = self.resolve(name)
        return self.bound[spec_id] if spec_id in self.bound else self.specs[spec_id]

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        return name.strip().lower() in self._names or self._parametric(name) is not None

    def __iter__(self) -> Iterator[T]:
        return iter(self.specs.values())

    def __len__(self) -> int:
        return len(self.specs)
