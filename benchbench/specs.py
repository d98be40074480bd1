"""Typed, frozen specs that plugins register (models, datasets, protocols, executors), the model
contract, and what a protocol gets to run one cell.

What the core knows of a model family, a dataset, a protocol or an executor, it learns here: the core
names no built-in plugin, and reads a protocol's settings only through the names its `Roles` give.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Mapping, Protocol, runtime_checkable

from benchbench.errors import BenchError

if TYPE_CHECKING:  # keep `import benchbench` free of torch. The contract names the run layer's values
    # only through the Protocols below, which the run layer fulfils: it imports specs, never the reverse.
    import numpy as np
    import torch
    from torch.utils.data import Dataset

    from benchbench.precision import Precision
    from benchbench.world import World


class PlannedCell(Protocol):
    """A cell as an executor sees it (benchbench.plan.cell.Cell fulfils it): one model x dataset x
    protocol x settings, its stable key, and the label progress lines give it."""

    @property
    def key(self) -> str: ...

    @property
    def label(self) -> str: ...


class RunInfo(Protocol):
    """What every cell of a run shares, as an executor checks it (benchbench.run.context.RunContext):
    where records go, the suite's name, the device as asked and the plugins a worker loads."""

    @property
    def run_dir(self) -> Path: ...

    @property
    def suite(self) -> str: ...

    @property
    def device(self) -> str: ...

    @property
    def plugins(self) -> Any: ...


class CellJob(Protocol):
    """All a worker needs to run one cell anywhere (benchbench.run.worker.Job): the run's context and
    the cell; what a protocol hands to processes it starts (the ranks of a data-parallel cell)."""

    @property
    def context(self) -> RunInfo: ...

    @property
    def cell(self) -> PlannedCell: ...


class CellDispatch(Protocol):
    """The driver's side of a run as an executor reports to it (benchbench.run.dispatch.Dispatch): a
    cell's job to send, then started, finished (with its record) or a fault the scheduler caused."""

    @property
    def run_dir(self) -> Path: ...

    def job(self, cell: Any) -> CellJob: ...

    def started(self, cell: Any, note: str = "") -> None: ...

    def finished(self, record: Any, cell: Any) -> None: ...

    def fault(self, cell: Any, reason: str, *, job_id: str | None, node: str | None = None,
              attempts: int | None = None) -> Any: ...


class ExecutionChoice(Protocol):
    """How a cell's model executes, decided once for the cell (benchbench.execution.Execution): compiled
    or eager (and why), memory format, optimiser, as the record's `exec_*` metrics."""

    @property
    def compile(self) -> bool: ...

    @property
    def reason(self) -> str: ...

    def metrics(self) -> dict[str, Any]: ...


class RecordView(Protocol):
    """What an export needs of a record to know it again (benchbench.store.record.Record)."""

    @property
    def key(self) -> str: ...

    @property
    def suite(self) -> str | None: ...

    @property
    def run_id(self) -> str | None: ...


@runtime_checkable
class ClassifierModel(Protocol):
    """What `ModelSpec.build` returns: an `nn.Module` whose forward gives logits (N, num_classes), and:"""

    def features(self, x: "torch.Tensor") -> "torch.Tensor":
        """The pre-logits representation (N, D): what the head sees; linear and few-shot probes use it."""

    def reset_head(self, num_classes: int) -> None:
        """A new head for `num_classes`, weights and bias zero (the paper's fine-tuning head)."""


# The model contract's methods, as a one-line error names them: what to define, and what it does.
CONTRACT_METHODS = {
    "forward": ("forward(self, x)", "returning the logits (N, num_classes)"),
    "features": ("features(self, x)", "returning the pre-logits (N, D) that the head sees (probes of frozen "
                                      "features read them)"),
    "reset_head": ("reset_head(self, num_classes)", "putting on a new head of num_classes outputs, weights and "
                                                    "bias zero (fine-tuning does)"),
}


def contract_gaps(model: Any) -> tuple[str, ...]:
    """The contract's methods (CONTRACT_METHODS) that `model`, a built model or its class, lacks: `forward`
    where it keeps nn.Module's placeholder, `features` and `reset_head` where they are missing."""
    cls = model if isinstance(model, type) else type(model)
    forward = getattr(cls, "forward", None)
    missing = ["forward"] if forward is None or getattr(forward, "__name__", "") == "_forward_unimplemented" else []
    return tuple(missing + [name for name in ("features", "reset_head") if not callable(getattr(model, name, None))])


class ModelContractError(BenchError):
    """A model plugin whose model lacks a method of the contract: its author's to fix."""


def check_contract(spec: "ModelSpec", model: Any, plugin: str) -> None:
    """ModelContractError, one line naming the plugin, the model, the methods it lacks and what to add, where
    `model` (what `spec.build` returned, or the class it builds) breaks the contract (`ClassifierModel`)."""
    gaps = contract_gaps(model)
    if not gaps:
        return
    cls = model if isinstance(model, type) else type(model)
    calls = [CONTRACT_METHODS[g][0].replace("self, ", "") for g in gaps]
    lacks = calls[0] if len(calls) == 1 else f"{', '.join(calls[:-1])} or {calls[-1]}"
    add = "; ".join(f"def {CONTRACT_METHODS[g][0]} {CONTRACT_METHODS[g][1]}" for g in gaps)
    raise ModelContractError(f"plugin {plugin!r}: model {spec.id!r}: its {cls.__name__} has no {lacks}; add {add} "
                             "(the model contract, benchbench.specs.ClassifierModel; docs/plugins.md)")


def built_class(build: Callable[..., Any]) -> type | None:
    """The class a ModelSpec's `build` makes, where that is known without building: `build` is the class,
    or a functools.partial of it; None otherwise (a function, a lambda)."""
    while isinstance(build, functools.partial):
        build = build.func
    return build if isinstance(build, type) else None


@runtime_checkable
class AdaptsStateDict(Protocol):
    """Optional for a model: fit a checkpoint's state dict to this instance before loading it."""

    def adapt_state_dict(self, state_dict: dict[str, "torch.Tensor"]) -> dict[str, "torch.Tensor"]:
        """E.g. resize position embeddings to this model's patch grid; ValueError when it cannot."""


@runtime_checkable
class PatchTokenModel(Protocol):
    """Optional for a model: a transformer over a grid of patch tokens with a [class] token (a ViT, a
    hybrid). Masked patch prediction (the `mpp` protocol) and `benchbench analyze` need it."""

    patch_size: int  # input pixels along one side of the square each token covers
    grid: int  # tokens along one side of the image

    def embed_patches(self, x: "torch.Tensor") -> "torch.Tensor":
        """The patch embeddings (N, grid * grid, D), row-major, before the [class] token and positions."""

    def encode(self, patches: "torch.Tensor") -> "torch.Tensor":
        """Final-norm tokens (N, 1 + P, D) from (possibly corrupted) patch embeddings (N, P, D); token 0 is
        the [class] token. `features(x)` is `encode(embed_patches(x))[:, 0]`."""

    def attention_weights(self, x: "torch.Tensor") -> list["torch.Tensor"]:
        """Every layer's softmax attention (N, heads, 1 + P, 1 + P), computed explicitly (slow; for
        analysis only: the forward pass keeps its fused kernel)."""

    def position_embeddings(self) -> "torch.Tensor":
        """The patch positions' learned embeddings (P, D), without the [class] token's."""

    def patch_filters(self) -> "torch.Tensor | None":
        """The linear patch projection's filters (D, C, p, p); None where patches come from a CNN."""


@dataclass(frozen=True)
class NpzLayout:
    """A family's checkpoint layout from the paper's code release (.npz of flattened Flax trees).

    `convert(arrays, model)` returns a state dict for `model`; names it does not know are kept as they
    are (the loader reports them as unexpected); ValueError for arrays that cannot be converted."""

    name: str  # e.g. "vit_jax npz"
    convert: Callable[[Mapping[str, "np.ndarray"], "torch.nn.Module"], dict[str, "torch.Tensor"]]


@dataclass(frozen=True)
class StateDictLayout:
    """A family's state-dict layout from another library (timm, torchvision, Hugging Face transformers).

    `detect(state_dict)` says from the names (and shapes) alone whether a state dict is in this layout;
    `convert(state_dict, model, config)` returns it as a state dict for `model`, where `config` is the
    checkpoint's own configuration where it has one (timm's or transformers' config.json; {} otherwise).
    Names it does not know are kept as they are (the loader reports them as unexpected); ValueError for
    a checkpoint it refuses, naming what the family lacks (a feature, an architecture).
    `preprocessing(config, sha256)`, where given, returns the checkpoint's evaluation transform when the
    layout knows it from elsewhere than the config (e.g. torchvision's weights, told by their hash)."""

    name: str  # e.g. "timm vit"
    detect: Callable[[Mapping[str, "torch.Tensor"]], bool]
    convert: Callable[[Mapping[str, "torch.Tensor"], "torch.nn.Module", Mapping[str, Any]], dict[str, "torch.Tensor"]]
    preprocessing: Callable[[Mapping[str, Any], str], "Preprocessing | None"] | None = None


INTERPOLATIONS = ("nearest", "bilinear", "bicubic", "lanczos")
RESIZE_MODES = ("shorter", "squash")


@dataclass(frozen=True)
class Preprocessing:
    """How evaluation images are prepared for a model (timm's and torchvision's evaluation transform):
    resize to `resize_size` (mode "shorter": the shorter side, keeping the aspect ratio; "squash": both
    sides, the ViT paper's), centre-crop `crop_size` x `crop_size`, scale to [0, 1], then
    (x - mean) / std per channel. timm's `crop_pct` gives the resize side floor(crop_size / crop_pct)
    (`from_crop_pct`, which keeps it in `given_crop_pct`, so that the transform at another size is
    timm's); without one, crop_pct is crop_size / resize_size. `source` says where it came from (a
    checkpoint's config, torchvision's weights, the paper), for records."""

    crop_size: int
    resize_size: int
    resize_mode: str = "shorter"
    interpolation: str = "bilinear"
    mean: tuple[float, ...] = (0.5, 0.5, 0.5)
    std: tuple[float, ...] = (0.5, 0.5, 0.5)
    source: str = ""
    # timm's crop_pct as a config or a suite gave it; not compared: equal transforms give equal images
    given_crop_pct: float | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.resize_mode not in RESIZE_MODES:
            raise ValueError(f"resize_mode {self.resize_mode!r}: allowed: {', '.join(RESIZE_MODES)}")
        if self.interpolation not in INTERPOLATIONS:
            raise ValueError(f"interpolation {self.interpolation!r}: allowed: {', '.join(INTERPOLATIONS)}")
        if self.crop_size <= 0 or self.resize_size <= 0:  # a crop beyond the resized image is padded, as timm's
            raise ValueError(f"crop_size {self.crop_size} and resize_size {self.resize_size} must be > 0")
        if len(self.mean) != len(self.std) or any(s <= 0 for s in self.std):
            raise ValueError(f"mean {self.mean} and std {self.std}: one value per channel, std > 0")
        if self.given_crop_pct is not None and not 0 < self.given_crop_pct < math.inf:
            raise ValueError(f"crop_pct {self.given_crop_pct}: must be > 0")

    @classmethod
    def from_crop_pct(cls, crop_size: int, crop_pct: float, **kw: Any) -> "Preprocessing":
        """timm's form: the resize side is floor(crop_size / crop_pct); crop_pct is kept."""
        if not 0 < crop_pct < math.inf:
            raise ValueError(f"crop_pct {crop_pct}: must be > 0")
        return cls(crop_size=crop_size, resize_size=math.floor(crop_size / crop_pct), given_crop_pct=crop_pct, **kw)

    @property
    def crop_pct(self) -> float:
        return self.given_crop_pct if self.given_crop_pct is not None else self.crop_size / self.resize_size

    def to_json(self) -> dict[str, Any]:
        """As a record names it."""
        return {"crop_size": self.crop_size, "resize_size": self.resize_size, "resize_mode": self.resize_mode,
                "interpolation": self.interpolation, "mean": list(self.mean), "std": list(self.std),
                "crop_pct": round(self.crop_pct, 6), "source": self.source}


@dataclass(frozen=True)
class ModelSpec:
    """One buildable model.

    `build(num_classes=, image_size=, in_chans=)` returns an `nn.Module` that is a `ClassifierModel`.
    """

    id: str
    name: str
    family: str
    build: Callable[..., "torch.nn.Module"]
    default_resolution: int
    aliases: tuple[str, ...] = ()
    description: str = ""
    # The input resolution must be a multiple of this (a ViT's patch size); suites are checked.
    resolution_multiple: int = 1
    # Input channels the model is fixed to (torchvision: 3); None: built for the dataset's channels.
    in_chans: int | None = None
    # The paper's .npz checkpoints of this family, where they exist.
    npz_layout: NpzLayout | None = None
    # State-dict layouts of other libraries that this family loads (safetensors, .pt/.pth files).
    state_dict_layouts: tuple[StateDictLayout, ...] = ()
    # How plots draw the family: a matplotlib marker and colour.
    marker: str = "X"
    color: str = "tab:gray"
    # True where the family trains faster in channels-last memory format on CUDA (benchbench.execution
    # uses it by default there); False where it measured slower or was not measured.
    prefers_channels_last: bool = False
    # What the compile break-even (benchbench.meters.compile_costs) assumes of the family where nothing
    # of the model was measured on the device: the fraction of the datasheet peak an eager training step
    # reaches, and the fraction of a step compiling saves; None: the break-even's defaults. Declare only
    # figures measured on the family, with their source beside them.
    eager_mfu: float | None = None
    compile_gain: float | None = None
    # Which family of timm's benchmark tables the model's speed behaves like, for the interval of a
    # projection onto another device (benchbench.projection.method.FAMILY_PATTERNS' names); None: the id
    # read as a timm model name, else "other".
    projection_family: str | None = None
    # The evaluation transform of the architecture's published weights (None: the dataset's own).
    preprocessing: Preprocessing | None = None
    # The model as deployed for inference, where that differs from the model as trained: a copy with its
    # branches and norms fused (timm's reparameterize_model: RepVGG, MobileOne, LeViT). A cell then also
    # records `params_reparameterized` and `gmacs_reparameterized` (fvcore's count, timm's convention, of
    # that form); None: the model as built is its inference form, and no such figures are recorded.
    inference_form: Callable[["torch.nn.Module"], "torch.nn.Module"] | None = None
    # A parametric family ("timm/<name>"): bind(arg) returns the ModelSpec of that argument, with id
    # "<id>/<arg>" (models take "/", datasets ":"). None for ordinary models.
    bind: Callable[[str], "ModelSpec"] | None = None
    bind_separator: ClassVar[str] = "/"

    def build_on_meta(self, **shape: int) -> "torch.nn.Module":
        """The model on the meta device: shapes without memory or arithmetic (for counting)."""
        import torch

        with torch.device("meta"):
            return self.build(**shape)


@dataclass(frozen=True)
class DataOptions:
    """Where dataset plugins look for files, whether they may download them, and what the model takes.

    `image_size` and `in_chans`, when set by the runner, are what the model expects: loaders resize
    to `image_size` and replicate grey channels up to `in_chans` in the transform (never the model).
    """

    root: Path | None = None
    download: bool = False
    image_size: int | None = None
    in_chans: int | None = None
    # Random training augmentation (crop + flip for photos, flip for in-memory tensors); protocols
    # turn it on for the split they train on only. Features and evaluation never see it.
    augment: bool = False
    # The evaluation transform of the model's weights (a checkpoint's, the architecture's); None: the
    # dataset's own (its normalisation, resized to image_size).
    preprocessing: Preprocessing | None = None


@dataclass(frozen=True)
class DatasetSpec:
    """One dataset. `load(split, options)` returns a map-style dataset of (image CHW float, label)."""

    id: str
    name: str
    num_classes: int
    image_size: int
    in_chans: int
    splits: tuple[str, ...]
    load: Callable[[str, DataOptions], "Dataset"]
    aliases: tuple[str, ...] = ()
    description: str = ""
    num_examples: Mapping[str, int] = field(default_factory=dict)  # per split, where known
    # A parametric dataset ("imagefolder:<path>"): bind(arg) returns the DatasetSpec of that
    # argument, with id "<id>:<arg>". None for ordinary datasets.
    bind: Callable[[str], "DatasetSpec"] | None = None
    # available(split, options) -> None, or raises the BenchError that says which files are missing and
    # how to provide them, as `load` would, without reading or downloading anything (with
    # options.download, a dataset that can download counts as available). Runs check it for every cell
    # before the first one starts. None: the data is always there (bundled, synthetic).
    available: Callable[[str, DataOptions], None] | None = None
    # The class identifiers in label order (ImageNet's sets: wnids), which a model's output classes are
    # matched against (benchbench.weights.classmap); None: the classes are known by index only.
    class_ids: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Setting:
    """One protocol setting: default value, accepted type(s), and an optional range check.

    `check(value)` returns an error message (for example "must be > 0") or None. `keyed=False` for a
    setting that changes how a cell is computed, not what (compile, memory format): it is left out of
    the cell's key, so changing it neither reruns recorded cells nor stops a run resuming.
    `locate(value)`, for a value that names something outside the suite (a checkpoint file), raises the
    BenchError that says it is not here; a run checks the cells it will run before the first starts,
    as it checks their datasets' files (`DatasetSpec.available`).
    """

    default: Any
    type: type | tuple[type, ...]
    help: str
    check: Callable[[Any], str | None] | None = None
    keyed: bool = True
    locate: Callable[[Any], None] | None = None


@dataclass(frozen=True)
class Roles:
    """Which of a protocol's own settings carry what the core resolves once per cell (benchbench.plan.cell:
    the input resolution, the world of processes, the precision; and whether the protocol declares
    benchbench.execution.SETTINGS). Each is the name of a setting the protocol declares, or None when
    it has none: the core reads settings through these names only."""

    resolution: str | None = None  # input px (0: the dataset's native size)
    num_classes: str | None = None  # outputs of the model's head (0: the dataset's classes)
    precision: str | None = None  # a precision request (benchbench.precision)
    precision_mode: str = "train"  # "train", or "infer" for protocols that run forward passes only (no fp8)
    devices: str | None = None  # data-parallel processes per node
    nodes: str | None = None
    sharding: str | None = None  # "ddp" | "fsdp"
    global_batch: str | None = None  # the batch the ranks split: it must divide by devices x nodes
    execution: bool = False  # declares benchbench.execution.SETTINGS (compile, channels-last, ...)

    def names(self) -> dict[str, str]:
        """{role: setting name} of the roles given."""
        return {role: name for role in ("resolution", "num_classes", "precision", "devices", "nodes", "sharding",
                                        "global_batch") if (name := getattr(self, role)) is not None}


@dataclass(frozen=True)
class ProtocolContext:
    """Everything a protocol needs to run one cell: what it runs (the model, its spec, the dataset's),
    the cell's settings and seed, where (device, data), and the choices resolved once for the cell:
    its precision (None for a protocol without one), world of processes and execution (None for a
    protocol that declares no execution settings: it runs eagerly)."""

    model: "torch.nn.Module"
    model_spec: ModelSpec
    dataset_spec: DatasetSpec
    data: DataOptions
    settings: Mapping[str, Any]
    device: "torch.device"
    seed: int
    precision: "Precision | None" = None
    world: "World | None" = None
    execution: "ExecutionChoice | None" = None
    show_progress: bool = True
    # The run directory (results/<suite>/<run-id>): protocols may keep artifacts under it, e.g.
    # checkpoints/ for a later fine-tuning cell. None outside a suite run.
    run_dir: Path | None = None
    # The cell's job (its run context and cell): what a protocol hands to processes it starts (the ranks
    # of a data-parallel cell) so that they load the same plugins and find the cell's specs by id.
    job: "CellJob | None" = None


def main_top1(settings: Mapping[str, Any]) -> dict[str, str]:
    """The accuracies of a protocol that reports one: `top1`, the cell's main accuracy (label "")."""
    return {"top1": ""}


@dataclass(frozen=True)
class ProtocolSpec:
    """One evaluation protocol. `run(ctx)` returns metrics whose names carry units, and where the cell
    loaded weights or used an evaluation transform, JSON objects under `checkpoint` and `preprocessing`
    (the record's fields of those names: benchbench.store.record.CELL_FIELDS)."""

    id: str
    name: str
    run: Callable[[ProtocolContext], Mapping[str, float]]
    settings: Mapping[str, Setting] = field(default_factory=dict)
    aliases: tuple[str, ...] = ()
    description: str = ""
    # Images the protocol will process for these settings, for cost estimates before a run:
    # estimate(settings, dataset_spec) -> {"train_images": forward+backward, "eval_images": forward}.
    estimate: Callable[[Mapping[str, Any], DatasetSpec], Mapping[str, float]] | None = None
    # False: the protocol only needs the architecture (compute, speed), so the runner may skip
    # random initialisation (seconds instead of a minute for ViT-H/14 on a CPU).
    needs_initialised_model: bool = True
    # accuracies(settings) -> {metric: label}: which of its metrics are accuracies in [0, 1], in the
    # order tables show them; label "" for the cell's main top-1, else e.g. "5-shot". A metric's
    # spread over repeats, where the protocol measures one, is the metric `<name>_std`.
    accuracies: Callable[[Mapping[str, Any]], Mapping[str, str]] = main_top1
    # True: the protocol trains on the cell's data, so its `train_img_per_s` is the pace of a real run
    # (cost estimates before a run use it); False for synthetic benchmarks and frozen-feature probes.
    trains: bool = True
    # check_model(model_spec) -> None, or why this protocol cannot run that model (e.g. it has no patch
    # tokens); suites are checked before any cell runs.
    check_model: Callable[[ModelSpec], str | None] | None = None
    # Which of its settings carry the resolution, precision, world and execution the core resolves.
    roles: Roles = field(default_factory=Roles)
    # The dataset splits it reads, checked for availability before a run starts; () for a protocol
    # that reads no data (compute projections, synthetic speed).
    reads: tuple[str, ...] = ("train", "test")


def input_shape(resolution: int | None, model_spec: ModelSpec, dataset_spec: DatasetSpec, *,
                weights_in_chans: int | None = None, num_classes: int | None = None) -> dict[str, int]:
    """What a cell's model is built for: `num_classes` (the protocol's num_classes role) when > 0, else the
    dataset's classes; `resolution` (the protocol's resolution role) when > 0, else the dataset's image
    size; the model's fixed channels if it has them, else those of the weights it starts from
    (`weights_in_chans`: benchbench.plan.shape), else the dataset's (grey data for a 3-channel model is
    replicated by the loader)."""
    return dict(num_classes=int(num_classes or dataset_spec.num_classes),
                image_size=int(resolution or dataset_spec.image_size),
                in_chans=model_spec.in_chans or weights_in_chans or dataset_spec.in_chans)


class Executor(Protocol):
    """Where a suite's cells run, from `ExecutorSpec.create(options)`: created, checked, run, closed
    (benchbench.run.dispatch.open_executor is that lifecycle)."""

    def check(self, context: RunInfo, cells: "list[PlannedCell]") -> None:
        """Raise BenchError (one line, the engine's own message) if these cells cannot be run; writes
        nothing."""

    def run(self, cells: "list[PlannedCell]", dispatch: CellDispatch) -> None:
        """Get every cell a record: `dispatch.started`/`finished` as they go, `dispatch.fault` for jobs
        the scheduler ended. KeyboardInterrupt propagates (jobs already submitted keep running where
        the engine allows; the journal lets the next run re-attach)."""

    def close(self) -> None:
        """Let go of the engine (connections, watchers). Never cancels submitted jobs."""


@dataclass(frozen=True)
class ExecutorSpec:
    """One executor. `create(options)` returns an `Executor`; `options` are validated against the
    `Setting`s declared here (unknown names get a "did you mean"; `option_aliases` maps an older
    spelling to its option)."""

    id: str
    name: str
    create: Callable[[Mapping[str, Any]], Executor]
    options: Mapping[str, Setting] = field(default_factory=dict)
    aliases: tuple[str, ...] = ()
    description: str = ""
    # Python packages the executor imports, and the extra of benchbench that installs them.
    requires: tuple[str, ...] = ()
    extra: str = ""
    # The executor of a run that names none (exactly one registered executor should say so).
    default: bool = False
    # True: cells run in the driver's own process, on its device (the driver must have the device).
    in_process: bool = False
    option_aliases: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Export:
    """What a reporter gets to export one run (`benchbench export RUN_DIR --to <id>`): its cells' records
    (the last attempt of each), the run's environment, files to attach to every cell (the run's table,
    its figures), and where to send them (`tracking_uri`, `project`, `directory`; None: the tracker's
    own default). `identity(record)` is the key that makes a re-export find what it exported before."""

    run_dir: Path
    suite: str
    run_id: str
    records: "tuple[RecordView, ...]"
    env: Mapping[str, Any] | None = None
    artifacts: tuple[Path, ...] = ()
    tracking_uri: str | None = None
    project: str | None = None
    directory: Path | None = None

    def identity(self, record: RecordView) -> str:
        return f"{record.suite or self.suite}/{record.run_id or self.run_id}/{record.key}"


@dataclass(frozen=True)
class Exported:
    """What an export did: trackers' runs created, runs found already there (not duplicated), and
    where they are."""

    created: int
    existing: int
    where: str


@dataclass(frozen=True)
class ReporterSpec:
    """A tracker a run's results can be exported to (MLflow, Weights & Biases, ...): `export(export)`
    sends each cell of `export` as one tracker run, skipping those a previous export sent, and raises
    BenchError (one line) when the tracker cannot be used."""

    id: str
    name: str
    export: Callable[[Export], Exported]
    aliases: tuple[str, ...] = ()
    description: str = ""
    # Python packages the reporter imports, and the extra of benchbench that installs them.
    requires: tuple[str, ...] = ()
    extra: str = ""
