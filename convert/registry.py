"""The one registration mechanism: the formats artifacts are written in, the sources, exporters, optimizers,
packagers and runtimes that read and write them, and the checks that analyse an artifact.

Each entry is a typed spec. The facts that decide what the pipeline does with an entry (which format a stage makes,
whether its results may come back from the cache, which packages and extra it needs, whether loading a format runs
code) have no default: a spec that leaves one out does not construct. Each spec is checked when it is registered, and
once every package has declared its entries, against the others (every format a stage names is registered, every
format some stage makes has a runtime).

Entries name their implementation by import path, so listing them (for the CLI's choices, ``convert doctor`` or the
coverage test) imports no framework. Each package declares its own entries in its ``__init__``; the registry imports
those packages on first use, then the modules named in ``$CONVERT_PLUGINS`` (comma-separated), which register formats
and stages kept outside this package in the same way. An implementation class reads its name, format and the rest
from its spec (``FromSpec``), never from attributes of its own.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, ClassVar, Literal

# Installed with the tool itself; every other package is declared by the entries that use it (``packages``, with the
# ``extra`` that installs it), once: the environment record, the cache's version keys and ``convert doctor`` read them here.
CORE_PACKAGES = ("numpy", "onnx", "onnxruntime")
CORE_EXTRA = "(core)"
# The packages that no entry declares, with the extra that installs each: those of features outside the registered
# stages (--mlflow, --engine ray), and one that changes what a source loads (a source's loading_packages, PEFT).
FEATURE_EXTRAS = {"mlflow": "mlflow", "ray": "ray", "peft": "peft"}
_DECLARING_PACKAGES = (
    "convert.formats",
    "convert.sources",
    "convert.exporters",
    "convert.optimizers",
    "convert.packagers",
    "convert.runtimes",
    "convert.checks",
)
PLUGINS_VARIABLE = "CONVERT_PLUGINS"
Precision = Literal["fp32", "fp16", "int8", "int4"]


def load_target(target: str) -> Any:
    """What ``package.module:attribute`` names (the attribute may be dotted: ``Class.method``)."""
    module_name, _, attribute = target.partition(":")
    found = importlib.import_module(module_name)
    for part in attribute.split("."):
        found = getattr(found, part)
    return found


def _check_target(target: str | None, what: str) -> None:
    if target is not None and (":" not in target or not all(target.partition(":")[::2])):
        raise ValueError(f"{what} must be 'package.module:attribute', not {target!r}")


@dataclass(frozen=True, kw_only=True)
class FormatSpec:
    """What is true of an artifact format wherever the pipeline meets one: how a file or folder someone already has is
    told to be one, whether loading it runs code, which files belong to it, and what the pipeline can do with it."""

    kind: ClassVar[str] = "format"
    name: str
    title: str  # what one artifact is called in a sentence: "an ONNX model"
    suffix: str  # an exporter's artifact is named <stem><suffix> (a file, or a folder where the suffix has no dot)
    # how an artifact someone already has is told to be of this format: its suffix, a file its folder holds, or its
    # bytes ("module:function(path) -> bool", tried after every suffix and folder marker)
    given_suffixes: tuple[str, ...]
    given_folder_marker: str | None
    given_detect: str | None
    # why an artifact of this format is never taken as given, and the next step (its suffixes are then refused), or None
    given_refusal: tuple[str, str] | None
    # why loading any artifact of this format runs code beyond the runtime's own ("" when it runs none) ...
    loading_runs_code: str
    # ... or, where that depends on the file, "module:function(path) -> list[str]": the reasons this one runs code
    runs_code_check: str | None
    # "module:function(path) -> list[Path]": the files beside it an artifact of this format names (checked to lie
    # inside its folder); its writer may put them at <artifact name><suffix> for each of ``companion_suffixes``
    external_data: str | None
    companion_suffixes: tuple[str, ...]
    # "module:function(path) -> list[str]": the names the file gives its outputs (a given artifact whose names differ
    # from the source's is compared in order), or None where the format names none the tool can read
    output_names: str | None
    # "module:function(path, {(output, axis): name})": makes declared output dims dynamic in place, where a declared
    # shape that did not hold can be repaired; None where the format cannot be
    repair_output_dims: str | None
    localizable: bool  # a failing artifact's first diverging value can be traced (convert/checks/localize.py)
    # "module:function(path, {input: shape}) -> convert.precision.Measured": what its matrix products compute in, read
    # from the artifact and its runtime (judged by convert/checks/attestation.py); None where the tool cannot read it
    attest: str | None
    # "module:function(source, path) -> program": the artifact is the program its exporter captured from the source
    # (the chain's one link is capture; localisation runs it beside the source); None for any other format
    captured_program: str | None

    def __post_init__(self) -> None:
        for target, what in (
            (self.attest, "attest"),
            (self.captured_program, "captured_program"),
            (self.given_detect, "given_detect"),
            (self.runs_code_check, "runs_code_check"),
            (self.external_data, "external_data"),
            (self.output_names, "output_names"),
            (self.repair_output_dims, "repair_output_dims"),
        ):
            _check_target(target, f"format {self.name!r}: {what}")
        if not self.suffix:
            raise ValueError(f"format {self.name!r}: suffix must name how its artifacts end")

    def code_reasons(self, path: Path) -> list[str]:
        """Why loading this artifact runs code (empty when it runs none)."""
        if self.loading_runs_code:
            return [self.loading_runs_code]
        return list(load_target(self.runs_code_check)(path)) if self.runs_code_check else []

    @property
    def code_free(self) -> bool:
        """Loading no artifact of this format runs code of the file's own."""
        return not self.loading_runs_code and self.runs_code_check is None

    def names_of_outputs(self, path: Path) -> list[str]:
        """The names the artifact gives its outputs (empty where the format names none the tool can read)."""
        return list(load_target(self.output_names)(path)) if self.output_names else []

    def files_beside(self, path: Path) -> list[Path]:
        return list(load_target(self.external_data)(path)) if self.external_data else []


@dataclass(frozen=True, kw_only=True)
class Spec:
    """What every registered implementation declares: its name, where it is, and what it needs installed."""

    kind: ClassVar[str]
    name: str
    target: str  # "package.module:Attribute"
    extra: str  # the extra that installs ``packages`` (CORE_EXTRA: the tool's own dependencies)
    packages: tuple[str, ...]  # the import packages its results depend on, beyond the core ones

    def __post_init__(self) -> None:
        _check_target(self.target, f"{self.kind} {self.name!r}: target")
        for spec_field in fields(self):
            value = getattr(self, spec_field.name)
            if "tuple" in str(spec_field.type) and not isinstance(value, tuple) and value is not None:
                raise ValueError(f"{self.kind} {self.name!r}: {spec_field.name} must be a tuple, not {value!r}")

    @property
    def all_packages(self) -> tuple[str, ...]:
        """What this entry's results depend on: the core packages and its own."""
        return tuple(dict.fromkeys([*CORE_PACKAGES, *self.packages]))

    def load(self) -> Any:
        return load_target(self.target)

    def formats_named(self) -> tuple[str, ...]:
        """The formats this entry reads or writes (checked to be registered)."""
        return ()


@dataclass(frozen=True, kw_only=True)
class SourceSpec(Spec):
    kind: ClassVar[str] = "source"
    # "module:function" importing the framework a model file of this source is loaded with: a worker started ahead of
    # its run calls it while the pipeline plans (convert/worker.py)
    framework_import: str | None
    suffixes: tuple[str, ...]  # model files ending so are this source's
    modules: tuple[str, ...]  # a Python object from these top-level modules is this source's
    # a folder holding one of these files (with the top-level JSON key ``folder_key``, where two sources share a
    # marker) is this source's; ``folder_name`` says what such a folder is
    folder_markers: tuple[str, ...]
    folder_key: str | None
    folder_name: str
    takes_callables: bool  # a module:callable reference is the model itself (JAX's f(params, *inputs)), not a factory
    # installed or not, each changes what the source loads (PEFT makes transformers load a folder's adapter)
    loading_packages: tuple[str, ...]

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_target(self.framework_import, f"source {self.name!r}: framework_import")
        if self.folder_markers and not self.folder_name:
            raise ValueError(f"source {self.name!r}: folder_name must say what a folder with {self.folder_markers} is")


@dataclass(frozen=True, kw_only=True)
class ExporterSpec(Spec):
    kind: ClassVar[str] = "exporter"
    format: str
    sources: tuple[str, ...]  # the source frameworks it takes

    def formats_named(self) -> tuple[str, ...]:
        return (self.format,)


@dataclass(frozen=True, kw_only=True)
class OptimizerSpec(Spec):
    kind: ClassVar[str] = "optimizer"
    takes: str  # the format of the validated artifact it starts from
    format: str
    suffix: str  # its artifact is named <stem><suffix>
    precision: Precision
    calibrated: bool  # it reads calibration feeds
    # False where its artifact must be rebuilt on every run (a TensorRT engine: made for one GPU and driver, and its
    # runner loads only engines this process built); decided before the pass's own packages are imported
    cacheable: bool
    requires: tuple[str, ...]  # packages without which the pass is refused at planning, not skipped
    weight_options: tuple[str, ...]  # the weight-only options of the request it reads (weight_group_size, weight_ratio)
    # what its precision names: the arithmetic of the matrix products ("compute"), or only how their weights are stored
    # ("weights": a weight-only pass; OpenVINO's FP16 compression, whose arithmetic the runtime chooses)
    claim: Literal["compute", "weights"]
    # the pass whose validated artifact (of the format it takes) this pass starts from, where not the exported one: a
    # TensorRT engine of a precision is built from the ONNX graph of that precision
    starts_from: str

    def formats_named(self) -> tuple[str, ...]:
        return (self.takes, self.format)


ANY_FORMAT = "*"


@dataclass(frozen=True, kw_only=True)
class PackagerSpec(Spec):
    """A stage that builds a package from the run's validated artifacts (a model-registry archive, a serving repository):
    its checks are theirs, inherited by digest, plus its own structural checks."""

    kind: ClassVar[str] = "packager"
    takes: tuple[str, ...]  # the formats of the artifacts it packages (ANY_FORMAT: every one)
    suffix: str  # its package is named <stem><suffix>

    def formats_named(self) -> tuple[str, ...]:
        return tuple(f for f in self.takes if f != ANY_FORMAT)

    def packs(self, fmt: str) -> bool:
        return ANY_FORMAT in self.takes or fmt in self.takes


@dataclass(frozen=True, kw_only=True)
class RuntimeSpec(Spec):
    kind: ClassVar[str] = "runtime"
    formats: tuple[str, ...]

    def formats_named(self) -> tuple[str, ...]:
        return self.formats


@dataclass(frozen=True, kw_only=True)
class CheckSpec(Spec):
    """An analysis of an artifact (convert/checks/): the numeric comparison, the repair of declared shapes, precision
    attestation, the chain, localisation, sensitivity. ``target`` is "module:function(run, subject)", which records its
    result on the artifact's record; the validation stage runs the checks that apply to an artifact in registration
    order within their phase."""

    kind: ClassVar[str] = "check"
    formats: tuple[str, ...]  # the formats of the artifacts it applies to (ANY_FORMAT: every one)
    # "validate": while the artifact is validated, before it is judged (a failure it records counts); "diagnose": once a
    # failing artifact is published, to explain the failure (it judges nothing)
    phase: Literal["validate", "diagnose"]
    # "module:Class": the report detail it records (a kind of convert.reports.details.ArtifactDetail, which reports
    # read and render wherever the check is registered); None where it records the artifact's checks
    detail: str | None
    # the stage cache keeps its detail and gives it back for the same artifact bytes, cases, tolerances and packages
    # (the comparison caches each runtime × device itself, and judges a kept measurement again)
    cacheable: bool

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_target(self.detail, f"check {self.name!r}: detail")
        if self.cacheable and self.detail is None:
            raise ValueError(f"check {self.name!r}: only a detail is kept in the cache; name its class or set cacheable=False")

    def formats_named(self) -> tuple[str, ...]:
        return tuple(f for f in self.formats if f != ANY_FORMAT)

    def applies_to(self, fmt: str) -> bool:
        return ANY_FORMAT in self.formats or fmt in self.formats


SPEC_TYPES: dict[str, type] = {
    t.kind: t for t in (FormatSpec, SourceSpec, ExporterSpec, OptimizerSpec, PackagerSpec, RuntimeSpec, CheckSpec)
}
KINDS = tuple(kind for kind in SPEC_TYPES if kind != "format")  # the kinds with an implementation and packages


class Registry:
    def __init__(self) -> None:
        self._entries: dict[tuple[str, str], Any] = {}
        self._by_target: dict[str, Any] = {}
        self._loaded = False

    def add(self, spec: Any) -> None:
        """Register a spec; a name registered twice, or a class registered under two names, is refused."""
        if type(spec) not in SPEC_TYPES.values():
            raise TypeError(f"register a spec ({', '.join(t.__name__ for t in SPEC_TYPES.values())}), not {spec!r}")
        key = (spec.kind, spec.name)
        if key in self._entries:
            raise ValueError(f"{spec.kind} {spec.name!r} is registered twice")
        target = getattr(spec, "target", None)
        if target is not None and target in self._by_target:
            raise ValueError(f"{target} is registered as {self._by_target[target].name!r} and again as {spec.name!r}")
        if self._loaded:  # once loaded, checked before it is added; before that, all together when loading ends
            self._check(spec)
        self._entries[key] = spec
        if target is not None:
            self._by_target[target] = spec

    def _ensure_loaded(self) -> None:
        if not self._loaded:
            self._loaded = True
            plugins = [name.strip() for name in os.environ.get(PLUGINS_VARIABLE, "").split(",") if name.strip()]
            for package in (*_DECLARING_PACKAGES, *plugins):
                importlib.import_module(package)
            for spec in self._entries.values():
                self._check(spec)
            made = {f for kind in ("exporter", "optimizer") for spec in self.entries(kind) for f in spec.formats_named()[-1:]}
            for fmt in self.entries("format"):
                if fmt.name in made and not self.entries("runtime", formats=fmt.name):
                    raise ValueError(f"format {fmt.name!r} is made by a stage but no runtime runs it: it could never be validated")

    def _check(self, spec: Any) -> None:
        if spec.kind == "format":
            return
        for fmt in spec.formats_named():
            if ("format", fmt) not in self._entries:
                raise ValueError(f"{spec.kind} {spec.name!r} names the format {fmt!r}, which is not registered")
        if spec.kind == "exporter":
            for source in spec.sources:
                if ("source", source) not in self._entries:
                    raise ValueError(f"exporter {spec.name!r} takes the source {source!r}, which is not registered")

    def entries(self, kind: str, **where: Any) -> list[Any]:
        """Specs of one kind whose fields match ``where`` (a tuple-valued field matches any member)."""
        if kind not in SPEC_TYPES:
            raise ValueError(f"unknown registry kind {kind!r}")
        self._ensure_loaded()
        return [
            spec
            for (entry_kind, _), spec in self._entries.items()
            if entry_kind == kind and all(_matches(getattr(spec, k), v) for k, v in where.items())
        ]

    def get(self, kind: str, name: str) -> Any:
        self._ensure_loaded()
        return self._entries[(kind, name)]

    def has(self, kind: str, name: str) -> bool:
        self._ensure_loaded()
        return (kind, name) in self._entries

    def format(self, name: str) -> FormatSpec:
        return self.get("format", name)

    def spec_of(self, implementation: type) -> Any:
        """The spec an implementation class is registered under (a subclass's own, not its base's)."""
        self._ensure_loaded()
        target = f"{implementation.__module__}:{implementation.__qualname__}"
        if target not in self._by_target:
            raise LookupError(f"{target} is not registered: add its spec in its package's __init__")
        return self._by_target[target]

    def packages(self, kind: str | None = None, **where: Any) -> tuple[str, ...]:
        """The import packages the matching entries declare (every entry of every kind by default), core first, in
        registration order, without repeats."""
        kinds = (kind,) if kind else KINDS
        declared = [p for k in kinds for entry in self.entries(k, **where) for p in entry.packages]
        return tuple(dict.fromkeys([*CORE_PACKAGES, *declared]))

    def loading_packages(self) -> tuple[str, ...]:
        """The packages sources declare as ``loading_packages``: not installed by any extra, yet when installed they
        change what a source loads (PEFT makes transformers load a folder's adapter)."""
        return tuple(dict.fromkeys(p for entry in self.entries("source") for p in entry.loading_packages))

    def source_packages(self, framework: str, kind: str = "") -> tuple[str, ...]:
        """What a source's results depend on: its framework's packages, those of the source of its ``kind`` where one is
        registered (a transformers folder is a torch model), those that change what either loads (installed or not),
        and the packages of every exporter that takes the framework."""
        sources = [self.get("source", name) for name in (framework, kind) if self.has("source", name)]
        return tuple(
            dict.fromkeys(
                [
                    *CORE_PACKAGES,
                    *(p for source in sources for p in (*source.packages, *source.loading_packages)),
                    *self.packages("exporter", sources=framework)[len(CORE_PACKAGES) :],
                ]
            )
        )

    def extra_of(self, package: str) -> str:
        """The extra that installs ``package``: CORE_EXTRA for the tool's own dependencies; else that of the most specific
        entry declaring it, the one declaring the fewest packages (transformers: the transformers source's extra, not the
        sentence-transformers source's, which needs transformers too); else the feature's (FEATURE_EXTRAS)."""
        if package in CORE_PACKAGES:
            return CORE_EXTRA
        declaring = [entry for kind in KINDS for entry in self.entries(kind) if package in entry.packages]
        if declaring:
            return min(declaring, key=lambda entry: len(entry.packages)).extra
        if package in FEATURE_EXTRAS:
            return FEATURE_EXTRAS[package]
        raise LookupError(f"no registered entry declares the package {package!r}: add it to a spec's packages or to FEATURE_EXTRAS")

    def target_formats(self) -> list[str]:
        """Every format some exporter can produce, in registration order (the CLI's --to choices)."""
        return list(dict.fromkeys(entry.format for entry in self.entries("exporter")))


def _matches(value: Any, wanted: Any) -> bool:
    if isinstance(value, tuple):
        return wanted in value
    return value == wanted


class FromSpec:
    """A class attribute read from the class's registered spec (``name = FromSpec()`` reads ``spec.name``), so an
    exporter, pass, packager or runtime declares what it is once, in its registration."""

    def __set_name__(self, owner: type, attribute: str) -> None:
        self.attribute = attribute

    def __get__(self, instance: Any, owner: type) -> Any:
        return getattr(REGISTRY.spec_of(owner), self.attribute)


REGISTRY = Registry()
