"""Every timm classification architecture as a model `timm/<name>` (e.g. `timm/resnet50`), and each
pretrained tag's configuration as `timm/<name>.<tag>` (e.g. `timm/vit_base_patch16_224.augreg2_in21k_ft_in1k`).

One parametric spec, `timm`, stands for all of them (timm has 1,300+ architectures and 1,800+ tags):
none is built, or even named, until an id is bound, and timm is imported then, not when the plugins
load; without timm the id fails naming the extra `benchbench[timm]`. Models are randomly initialised
(nothing is downloaded; a checkpoint loads through `init`). A bound spec is a `TimmSpec`: the timm
name and tag a loader needs, and for a tag what its weights expect: the default resolution
(`input_size`), the evaluation transform (`preprocessing`, and `test_preprocessing` at timm's test
size) and the head's class space (`pretrained_classes`). The timm model is kept whole under `model.`
(a timm state dict loads with that prefix added); the wrapper adds `features` (the input of the
final classifier), `reset_head` and `head_prefixes` (timm's own head names, so that a checkpoint of other
classes loads with its head dropped).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Mapping

import torch
from torch import nn

from benchbench import hookimpl
from benchbench.weights.config import timm_data_config
from benchbench.errors import BenchError, unknown_message
from benchbench.specs import ModelSpec, Preprocessing, StateDictLayout

if TYPE_CHECKING:
    from types import ModuleType

ID = "timm"
EXTRA = "pip install 'benchbench[timm]'"
FAMILY_DESCRIPTION = (f"{ID}/<name> (any timm classification architecture, random init) or {ID}/<name>.<tag> "
                      "(that pretrained tag's input size, transform and classes); needs the extra "
                      "benchbench[timm]; the names: python -c 'import timm; print(timm.list_models())'")


def _timm(model_id: str) -> "ModuleType":
    """timm, imported on first use; BenchError naming the extra when it is not installed."""
    try:
        import timm
    except ImportError as exc:
        raise BenchError(f"model {model_id!r} needs timm, which is not installed: {EXTRA}") from exc
    return timm


@dataclass(frozen=True)
class PretrainedClasses:
    """The class space of a pretrained tag's head: `num_classes` outputs, of which the first
    `label_offset` are no class (1: a background class at index 0, as in 1001-class TensorFlow
    checkpoints; timm drops it when it loads such weights). `imagenet_subset` is timm's name of the
    label set (`timm.data.infer_imagenet_subset`: "imagenet-1k", "imagenet-12k", "imagenet-21k-goog",
    ...; None when the head is not an ImageNet one, or the tag has no head: num_classes 0)."""

    num_classes: int
    label_offset: int = 0
    imagenet_subset: str | None = None

    def wnids(self) -> tuple[str, ...] | None:
        """The WordNet ids of the classes, in output order after the offset (timm's ImageNetInfo);
        None when `imagenet_subset` is."""
        if self.imagenet_subset is None:
            return None
        from timm.data import ImageNetInfo

        return tuple(ImageNetInfo(self.imagenet_subset).label_names())


@dataclass(frozen=True)
class TimmSpec(ModelSpec):
    """A bound `timm/<name>[.<tag>]`: a ModelSpec plus what timm says of it. `timm_name` and
    `pretrained_tag` are what `timm.create_model(f"{timm_name}.{pretrained_tag}")` and a weights loader
    need; `preprocessing` (ModelSpec's) is the tag's transform at `input_size` / `crop_pct`,
    `test_preprocessing` the one at `test_input_size` / `test_crop_pct` (what timm's results CSVs also
    report; None where the tag has neither); both None for an untagged architecture (trained from
    scratch, it takes the dataset's transform)."""

    timm_name: str = ""
    pretrained_tag: str | None = None
    test_preprocessing: Preprocessing | None = None
    pretrained_classes: PretrainedClasses | None = None


def preprocessing_of(cfg: Any, *, test_size: bool = False, source: str = "") -> Preprocessing:
    """A timm pretrained config (`PretrainedCfg` or its dict) as the evaluation transform timm's
    `resolve_data_config` + `create_transform` build from it (benchbench.weights.config.timm_data_config,
    the reader of config.json files too): `test_input_size` and `test_crop_pct` where `test_size` and the
    config has them, else `input_size` and `crop_pct`; timm's defaults where a field is unset.
    ValueError for what Preprocessing cannot express (non-square inputs, crop_mode "border")."""
    return timm_data_config(cfg if isinstance(cfg, dict) else cfg.to_dict(), test=test_size, source=source)


def pretrained_classes_of(cfg: Any) -> PretrainedClasses:
    """A timm pretrained config's head: its outputs, label offset and ImageNet subset."""
    cfg = cfg if isinstance(cfg, dict) else cfg.to_dict()
    from timm.data import infer_imagenet_subset

    num_classes = int(cfg.get("num_classes") or 0)
    offset = int(cfg.get("label_offset") or 0)
    subset = infer_imagenet_subset({"num_classes": num_classes - offset}) if num_classes else None
    return PretrainedClasses(num_classes=num_classes, label_offset=offset, imagenet_subset=subset)


def _heads(model: nn.Module) -> tuple[nn.Module, ...]:
    """`get_classifier()`'s head, or a distilled model's two; none for a timm encoder without one."""
    head = model.get_classifier() if hasattr(model, "get_classifier") else ()
    return tuple(head) if isinstance(head, (tuple, list)) else (head,)


def _final_layers(model: nn.Module) -> list[nn.Module]:
    """The layers that make logits: the last Linear or Conv2d (1x1-conv heads) of each module of
    `classifier_names` (a layer itself, or e.g. MetaFormer's MLP head's last layer)."""
    modules = dict(model.named_modules())
    return [layers[-1] for name in classifier_names(model)
            if (layers := [m for m in modules[name].modules() if isinstance(m, (nn.Linear, nn.Conv2d))])]


def classifier_names(model: nn.Module) -> tuple[str, ...]:
    """The module names of a timm model's head, as timm itself gives them: its `pretrained_cfg["classifier"]`
    (what timm's loader drops when the classes differ: `fc`, `head`, `head.fc`, `classifier`, `head.fc.fc2`
    in an MLP head, ...; two for a distilled model's heads, `head` and `head_dist`), then any module of
    `get_classifier()` that those names miss (the distilled head that levit_384_s8's config leaves out)."""
    modules = dict(model.named_modules())
    given = (getattr(model, "pretrained_cfg", None) or {}).get("classifier") or ()
    names = tuple(n for n in ((given,) if isinstance(given, str) else given) if n in modules)
    heads = (n for h in _heads(model) for n, m in modules.items() if m is h and n)
    return names + tuple(h for h in heads if not any(h == n or n.startswith(f"{h}.") or h.startswith(f"{n}.")
                                                      for n in names))


class TimmClassifier(nn.Module):
    """A timm classifier with `features(x)`, `reset_head(num_classes)` and `head_prefixes`."""

    def __init__(self, model: nn.Module, timm_name: str):
        super().__init__()
        self.model = model
        self.timm_name = timm_name  # timm.create_model(timm_name) builds the same architecture

    @property
    def head(self) -> nn.Module:
        """The final classifier layer (the first of several: a distilled model's two heads, CrossViT's
        one per branch)."""
        return _final_layers(self.model)[0]

    @property
    def head_prefixes(self) -> tuple[str, ...]:
        """The head's tensor names' prefixes (`classifier_names`, under `model.`), for checkpoint loading
        (`drop_head`): a checkpoint of other classes loads with these dropped, every other tensor kept."""
        return tuple(f"model.{name}." for name in classifier_names(self.model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Pre-logits (B, F): timm's `forward_head(forward_features(x), pre_logits=True)`, the input of
        the final classifier layer (after the pooling and the head's norm or MLP, where a model has
        them); a feature map (a 1x1-conv head's input) is globally average-pooled."""
        f = self.model.forward_head(self.model.forward_features(x), pre_logits=True)
        return f.mean(dim=(2, 3)) if f.ndim == 4 else f.flatten(1)

    def reset_head(self, num_classes: int) -> None:
        """timm's `reset_classifier(num_classes)`, on the old head's device and dtype, the final layers'
        weights and biases zero (an MLP before them keeps timm's fresh init, so gradients reach it)."""
        old, kept = self.head.weight, {id(t): t for t in self.model.parameters()}  # held: no id is reused
        self.model.reset_classifier(num_classes)
        for module in (m for h in _heads(self.model) for m in h.modules()):
            if any(id(t) not in kept for t in module.parameters(recurse=False)):  # made by reset_classifier
                module.to(device=old.device, dtype=old.dtype)
        for layer in _final_layers(self.model):
            nn.init.zeros_(layer.weight)
            if layer.bias is not None:
                nn.init.zeros_(layer.bias)


def create(timm_name: str, fixed_input_size: bool, *, num_classes: int = 1000, image_size: int = 224,
           in_chans: int = 3) -> TimmClassifier:
    """`timm.create_model(timm_name)` for `num_classes` and `in_chans`; models whose parameters depend
    on the input size (position embeddings, attention windows: timm's `fixed_input_size`) are built
    for `image_size`."""
    timm = _timm(f"{ID}/{timm_name}")
    kwargs: dict[str, Any] = {"num_classes": num_classes, "in_chans": in_chans}
    if fixed_input_size:
        kwargs["img_size"] = image_size
    try:
        model = timm.create_model(timm_name, pretrained=False, **kwargs)
    except TypeError as exc:
        if "img_size" not in str(exc):
            raise
        raise ValueError(f"{ID}/{timm_name}: its parameters depend on the input size, but its timm builder "
                         f"takes no img_size; use its default resolution") from exc
    return TimmClassifier(model, timm_name)


def reparameterized(model: nn.Module) -> nn.Module:
    """A copy of `model` in timm's inference form: `timm.utils.reparameterize_model`, which fuses each
    module's branches and norms where it has a `fuse`, `reparameterize` or `switch_to_deploy` (RepVGG,
    MobileOne, FastViT, LeViT, RepViT); a model with none of them is copied unchanged."""
    from timm.utils.model import reparameterize_model

    return reparameterize_model(model, inplace=False)


def _unbound(**shape: int) -> nn.Module:
    raise BenchError(f"model {ID!r} needs an architecture: write {ID}/<name> or {ID}/<name>.<tag>")


def _check_name(timm: "ModuleType", model_id: str, name: str, tag: str | None) -> None:
    """BenchError unless timm has architecture `name` and (where given) pretrained tag `tag` of it."""
    if not timm.is_model(name):
        raise BenchError(f"model {model_id!r}: " + unknown_message(
            "timm architecture", name, timm.list_models(),
            how_to_list="python -c 'import timm; print(timm.list_models())'"))
    if tag is None:
        return
    tags = [t.partition(".")[2] for t in timm.list_pretrained(f"{name}.*")]
    if not tags:
        raise BenchError(f"model {model_id!r}: timm has no pretrained tag of {name}; write {ID}/{name}")
    if tag not in tags:
        raise BenchError(f"model {model_id!r}: " + unknown_message(
            f"pretrained tag of {name}", tag, tags,
            how_to_list=f"python -c \"import timm; print(timm.list_pretrained('{name}.*'))\""))


def _pretrained_fields(cfg: Any, model_id: str) -> dict[str, Any]:
    """A tag's evaluation transforms and classes, as TimmSpec fields; BenchError for a config that
    Preprocessing cannot express."""
    source = f"timm pretrained_cfg {model_id.partition('/')[2]}"
    try:
        return dict(
            preprocessing=preprocessing_of(cfg, source=source),
            test_preprocessing=preprocessing_of(cfg, test_size=True, source=f"{source}, test size")
            if cfg.test_input_size or cfg.test_crop_pct else None,
            pretrained_classes=pretrained_classes_of(cfg),
        )
    except ValueError as exc:
        raise BenchError(f"model {model_id!r}: its pretrained config cannot be expressed: {exc}") from None


def _is_timm_state_dict(state_dict: Mapping[str, Any]) -> bool:
    """timm's own names: the wrapper's, less its `model.` prefix."""
    return bool(state_dict) and not any(k.startswith("model.") for k in state_dict)


def _from_timm(state_dict: Mapping[str, Any], model: nn.Module, config: Mapping[str, Any]) -> dict[str, Any]:
    return {f"model.{k}": v for k, v in state_dict.items()}


# A timm checkpoint (.safetensors, .pth, hf-hub:timm/...) loads into timm/<name>[.<tag>] as it is: the
# model is timm's own, kept whole under `model.`.
TIMM_LAYOUT = StateDictLayout("timm", _is_timm_state_dict, _from_timm)


def bind(arg: str) -> TimmSpec:
    """The spec of `timm/<arg>`, `arg` being `<name>` or `<name>.<tag>`: checked against timm's
    registry (a did-you-mean otherwise), nothing built."""
    model_id = f"{ID}/{arg}"
    timm = _timm(model_id)
    from timm.models import get_pretrained_cfg, split_model_name_tag

    name, tag = split_model_name_tag(arg)
    if "." in arg and not tag:
        raise BenchError(f"model {model_id!r}: empty pretrained tag; write {ID}/{name} or {ID}/{name}.<tag>")
    tag = tag or None
    _check_name(timm, model_id, name, tag)
    cfg = get_pretrained_cfg(arg)  # untagged: the architecture's default tag
    resolution = cfg.input_size[-1]
    what = (f"timm {name} at pretrained tag {tag}'s configuration ({resolution} px); weights load through init"
            if tag else f"timm.create_model({name!r}), randomly initialised")
    return TimmSpec(
        id=model_id, name=f"timm {arg}", family=ID, build=partial(create, name, bool(cfg.fixed_input_size)),
        default_resolution=resolution,
        # a tag's weights take RGB (grey images are replicated by the loader); an architecture trained
        # from scratch is built for the dataset's channels
        in_chans=3 if tag else None,
        description=what, marker="P", color="tab:olive",
        timm_name=name, pretrained_tag=tag, state_dict_layouts=(TIMM_LAYOUT,), inference_form=reparameterized,
        **(_pretrained_fields(cfg, model_id) if tag else {}),
    )


@hookimpl
def register_models(register) -> None:
    register(ModelSpec(
        id=ID, name="timm: every classification architecture", family=ID, build=_unbound, default_resolution=224,
        description=FAMILY_DESCRIPTION, marker="P", color="tab:olive", bind=bind,
    ))
