"""Every run option, declared once: its CLI flag, help and --help section (``group``), its Python keyword, its key in a
promotion policy, the cached stages whose results it changes, and whether an artifact's reproduce command repeats it.

The CLI's options (``cli.export_command``), the requests the API and the gate build (``from_api``, ``from_policy``),
the report's ``options`` record, the cache's option digest and the reproduce command (convert/pipeline/reproduce.py)
are all derived from ``OPTIONS``; a test proves every option is either reproduced or excluded with its reason.

Each option's default is declared here once, too: ConvertRequest's field defaults (``DEFAULTS``), the Python API's
keyword defaults (``API_DEFAULTS``), the click defaults (``RunOption.click_default``) and the policy schema's defaults
(``policy_default``) are read from it. Where a surface's default differs, the option says so and why (``Differs``);
tests/convert/test_options.py compares the default on every surface.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal, get_args

from convert.errors import ConvertError

Kind = Literal["value", "flag", "negated-flag", "multiple", "comma-list"]
# When an artifact's reproduce command repeats the option: always, only for an optimization's artifact, or never
Reproduce = Literal["always", "optimization", "never"]
# The cached results an option changes (convert/cache.py): the stages whose keys take its value
Stage = Literal["load", "reference", "export", "optimize", "validate"]
# Where a user gives an option: the command line, the Python API's keywords, a promotion policy
Surface = Literal["cli", "api", "policy"]
# The section of ``--help`` an option is listed under; sections come in this order
Group = Literal[
    "Input and source",
    "Security",
    "Targets",
    "Optimization",
    "Validation",
    "Validation data",
    "Benchmark",
    "Output and report",
    "Execution, cache and isolation",
]
GROUPS: tuple[Group, ...] = get_args(Group)


@dataclass(frozen=True)
class Differs:
    """A surface whose default is not the option's own: declared with the option, and why, never a silent second one."""

    surface: Surface
    value: Any  # in the request's form, as RunOption.default
    why: str


def number_text(value: float) -> str:
    """A number as a user writes it: 4294967295, not 4.29497e+09; 0.5; nan."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


@dataclass(frozen=True)
class Bounds:
    """The values a number option takes, from ``low`` to ``high`` (None: no bound on that side), both ends included
    unless ``low_open`` (a positive number: ``Bounds(0, low_open=True)``). The CLI and the API are refused by
    ``check_bounds`` when the run is planned; a policy's schema takes them as its field's constraints."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False

    def holds(self, value: float) -> bool:
        """Whether ``value`` is within them (NaN never is)."""
        above = self.low is None or (value > self.low if self.low_open else value >= self.low)
        return above and (self.high is None or value <= self.high)

    def requirement(self, value: float) -> str:
        """What a value outside them must be, on the side it misses: "at least 1", "positive", "at most 10000"."""
        if self.high is not None and value > self.high:
            return f"at most {number_text(self.high)}"
        if self.low_open:
            return "positive" if self.low == 0 else f"more than {number_text(self.low)}"
        return f"at least {number_text(self.low)}" if self.low is not None else "a number"

    def range_text(self) -> str:
        """Every value they hold: "from 1 to 10000", "above 0 and up to 3600", "of at least 1"."""
        if self.low is None:
            return f"up to {number_text(self.high)}" if self.high is not None else "of any size"
        low = f"above {number_text(self.low)}" if self.low_open else f"from {number_text(self.low)}"
        if self.high is None:
            return low if self.low_open else f"of at least {number_text(self.low)}"
        return f"{low} {'and up to' if self.low_open else 'to'} {number_text(self.high)}"

    def constraints(self) -> dict[str, float]:
        """The pydantic Field constraints of a policy key (ge/gt, le)."""
        found = {} if self.low is None else {"gt" if self.low_open else "ge": self.low}
        return found if self.high is None else {**found, "le": self.high}


@dataclass(frozen=True)
class RunOption:
    name: str  # the ConvertRequest field and the Python API keyword
    flag: str  # the CLI flag ("--no-cache" for a negated flag)
    help: str  # one sentence for --help; the rest goes in ``details``
    # required of every option, so that none lands outside the sections of --help
    group: Group = field(kw_only=True)
    details: str = field(default="", kw_only=True)  # what --help leaves out: shown in the generated CLI reference
    kind: Kind = "value"
    type: Any = str  # the click type of a value
    # the value a run takes when no one gives one, in the request's form (a list kind's is a tuple, a PATH's a Path):
    # ConvertRequest's field default, and every surface's unless ``differs`` names that surface
    default: Any = None
    differs: tuple[Differs, ...] = ()
    metavar: str | None = None
    show_default: bool = False
    policy: str | None = None  # "section.key" in a promotion policy
    stages: tuple[Stage, ...] = ()  # cached stages whose results it changes
    reproduce: Reproduce = "always"
    not_reproduced: str = ""  # why an option is never repeated (required with reproduce="never")
    api: str | None = None  # the API keyword where it is not ``name``
    choices_from: str | None = None  # a registry kind whose entries' names are the only values
    choices: tuple[str, ...] = ()  # the only values (where no registry lists them)
    recorded: bool = True  # kept in the report's options (not where the run writes, nor --force)
    bounds: Bounds | None = None  # the values a number option takes, on every surface

    def __post_init__(self) -> None:
        if self.group not in GROUPS:
            raise ValueError(f"option {self.flag}: group {self.group!r} is none of {GROUPS}")
        # a list kind's default may be declared as None or "": it is kept as the request holds it, ()
        object.__setattr__(self, "default", self.to_request(self.default))

    @property
    def keyword(self) -> str:
        return self.api or self.name

    def default_on(self, surface: Surface) -> Any:
        """The default a surface gives, in the request's form: the option's own unless it declares a difference there."""
        return next((differs.value for differs in self.differs if differs.surface == surface), self.default)

    @property
    def click_default(self) -> Any:
        """The click parameter's default: the CLI's default as the command line spells it (a negated flag's is False)."""
        value = self.default_on("cli")
        if self.kind == "negated-flag":
            return not value
        if self.kind == "comma-list":
            return ",".join(value) or None
        if self.kind == "multiple":
            return tuple(value) or None
        return value

    @property
    def parameter(self) -> str:
        """The click parameter name: the flag without dashes, as click names it."""
        return self.flag.lstrip("-").replace("-", "_")

    def to_request(self, value: Any) -> Any:
        """The ConvertRequest value from a CLI, API or policy value."""
        if self.kind == "negated-flag":
            return value
        if self.kind == "comma-list":
            if isinstance(value, str):
                return tuple(value.split(",")) if value else ()
            return tuple(value or ())
        if self.kind == "multiple":
            return tuple(value or ())
        if self.type is PATH and value is not None and isinstance(value, (str, os.PathLike)):
            return Path(value)
        return value


DEFAULT_DATA_SAMPLES = 500
CALIBRATION_METHODS = ("minmax", "entropy", "percentile")
UNBUILT_CHOICES = ("fail", "warn")  # --unbuilt: what a requested artifact that could not be built does to the verdict
# a file or folder option: a Path in the request, the user's spelling in the reproduce command; in a promotion policy
# relative to the policy file's folder (policy._resolved), its default included (out: "out" beside the policy)
PATH = Path

OPTIONS: tuple[RunOption, ...] = (
    RunOption(
        "to",
        "--to",
        "Comma-separated target formats: {formats} (an ONNX model's default: onnx, checked and normalised).",
        group="Targets",
        kind="comma-list",
        default=(),  # the model's own targets (plan.default_targets): onnx for an ONNX model, else --to is required
        differs=(Differs("api", ("onnx",), "a Python caller gets ONNX without naming it: convert.convert(model)"),),
        metavar="FORMATS",
        policy="require.targets",
        reproduce="never",
        not_reproduced="each artifact's command names its own target",
    ),
    RunOption(
        "out",
        "--out",
        "Output folder for the artifacts and report.json.",
        group="Output and report",
        type=PATH,
        default=Path("out"),
        differs=(Differs("api", None, "convert.convert() without out= writes to a new temporary folder"),),
        show_default=True,
        policy="out",
        reproduce="never",
        not_reproduced="each artifact's command names its own folder",
        recorded=False,
    ),
    RunOption(
        "framework",
        "--framework",
        "The source framework, when it cannot be told from the model.",
        group="Input and source",
        policy="model.framework",
        stages=("load",),
        choices_from="source",
    ),
    RunOption(
        "task",
        "--task",
        "The task of a Hugging Face Transformers model, by Optimum's names (default: inferred from config.architectures).",
        group="Input and source",
        details="E.g. fill-mask, or text-generation-with-past: a decoder with its cache, checked over greedy generation.",
        policy="model.task",
        stages=("load",),
    ),
    RunOption(
        "component",
        "--component",
        "Convert only these components of a model made of several (default: every one), e.g. encoder,decoder.",
        group="Input and source",
        details="An encoder-decoder folder's are encoder, decoder and decoder_with_past; a CLIP or SigLIP folder's text_model, "
        "vision_model and joint; a diffusion pipeline folder's text_encoder, unet and vae_decoder. The assembled check "
        "runs where every component was converted.",
        kind="comma-list",
        metavar="NAME[,NAME...]",
        policy="model.component",
        stages=("load",),
    ),
    RunOption(
        "dtype",
        "--dtype",
        "What a Hugging Face folder's floating weights compute in (source: the checkpoint's own dtype).",
        group="Input and source",
        details="float32 upcasts a bfloat16 or float16 checkpoint, exactly, so every runtime runs the artifact.",
        default="float32",
        show_default=True,
        policy="model.dtype",
        stages=("load",),
        choices=("float32", "float16", "bfloat16", "source"),
    ),
    RunOption(
        "weights",
        "--weights",
        "Weights for a module:callable factory: .safetensors or a torch.save'd state dict (torch), .weights.h5 (keras).",
        group="Input and source",
        type=PATH,
        policy="model.weights",
        stages=("load",),
    ),
    RunOption(
        "weights_key",
        "--weights-key",
        "The entry of a --weights training checkpoint that holds the model's state dict, e.g. model_state_dict or ema.",
        group="Input and source",
        details="Default: the one entry whose keys fit the model's.",
        metavar="KEY",
        policy="model.weights_key",
        stages=("load",),
    ),
    RunOption(
        "params",
        "--params",
        "Params of a JAX function f(params, *inputs), or variables of a flax linen module: .msgpack, .npz or .safetensors.",
        group="Input and source",
        details=".msgpack as flax.serialization.to_bytes writes it; in .npz and .safetensors the keys are joined by '/'. Never unpickled.",
        type=PATH,
        policy="model.params",
        stages=("load",),
    ),
    RunOption(
        "inputs",
        "--input",
        'An input spec name:dtype[dims]{low..high}, e.g. "x:float32[B,3,224,224]", one per input (symbols are dynamic axes).',
        group="Input and source",
        kind="multiple",
        metavar="SPEC",
        policy="model.inputs",
        stages=("load",),
    ),
    RunOption(
        "example_inputs",
        "--example-inputs",
        "An .npz with one example array per input (by name): the export shape.",
        group="Input and source",
        type=PATH,
        policy="model.example_inputs",
        stages=("load",),
    ),
    RunOption(
        "dims",
        "--dim",
        "Sizes of a symbolic dim: the export size, then other validation sizes, e.g. B=2,1,8.",
        group="Validation",
        kind="multiple",
        metavar="SYMBOL=SIZES",
        policy="validation.dims",
        stages=("reference", "export", "validate"),
    ),
    RunOption(
        "optimize",
        "--optimize",
        "Comma-separated optimizations of the exported artifacts, each validated: {optimizers}; or auto.",
        group="Optimization",
        details="auto builds every pass this machine can run, validates and benchmarks them, and keeps the fastest within the accuracy budget.",
        kind="comma-list",
        default=(),
        metavar="PASSES",
        policy="require.optimizations",
        reproduce="never",
        not_reproduced="an optimization's command names its own pass",
    ),
    RunOption(
        "package",
        "--package",
        "Comma-separated packages to build from the validated artifacts: {packagers}.",
        group="Targets",
        details="Each is checked as its consumer reads it. A package holds only artifacts that passed, and passes only where their bytes in "
        "it are the validated ones.",
        kind="comma-list",
        default=(),
        metavar="PACKAGERS",
        policy="require.packages",
        reproduce="never",
        not_reproduced="a package is built from the run's artifacts, not remade by one artifact's command",
    ),
    RunOption(
        "data",
        "--data",
        "Your own samples, on which every artifact is validated besides the generated inputs: .npz feeds, datasets or images.",
        group="Validation data",
        details="A folder of .npz feeds, one .npz with a leading sample axis, a Hugging Face datasets folder (save_to_disk), or an "
        "image folder CLASS/IMAGE.png. With labels (an array or column named label, or the image classes) the task metrics "
        "(top-1/top-5 accuracy, token accuracy, exact match) of the source and of each artifact are compared.",
        type=PATH,
        policy="validation.data",
        stages=("reference", "optimize", "validate"),
    ),
    RunOption(
        "data_samples",
        "--data-samples",
        "How many samples of --data and --calibration-data are used, chosen with --seed when there are more.",
        group="Validation data",
        details="The report records which.",
        type=int,
        default=DEFAULT_DATA_SAMPLES,
        show_default=True,
        metavar="N",
        policy="validation.data_samples",
        stages=("reference", "optimize", "validate"),
        bounds=Bounds(1),
    ),
    RunOption(
        "columns",
        "--columns",
        "Which column or .npz array feeds an input, or holds the labels: INPUT=COLUMN, e.g. input_ids=tokens,label=target.",
        group="Validation data",
        kind="multiple",
        metavar="INPUT=COLUMN",
        policy="validation.columns",
        stages=("reference", "optimize", "validate"),
    ),
    RunOption(
        "preprocess",
        "--preprocess",
        "How an image folder's files become the input: size=HxW;mean=R,G,B;std=R,G,B;layout=NCHW|NHWC.",
        group="Validation data",
        details="Pixels are scaled to 0..1 first; size and layout default to the input spec's.",
        metavar="SPEC",
        policy="validation.preprocess",
        stages=("reference", "optimize", "validate"),
    ),
    RunOption(
        "metric",
        "--metric",
        "A task metric of your own, module:function or file.py:function, called as function(outputs, labels) (needs --trust-code).",
        group="Validation data",
        details="outputs and labels are the lists of output dicts and label arrays of the --data samples; it returns a number where higher is "
        "better (budget it with task_metric_drop). It runs your code, so it needs --trust-code.",
        metavar="MODULE:FUNCTION",
        policy="validation.metric",
        stages=("optimize", "validate"),
    ),
    RunOption(
        "calibration_data",
        "--calibration-data",
        "Inputs for INT8 calibration, in any form --data takes (default: generated from the specs).",
        group="Optimization",
        type=PATH,
        policy="validation.calibration_data",
        stages=("optimize",),
        reproduce="optimization",
    ),
    RunOption(
        "calibration_method",
        "--calibration-method",
        "How static INT8 passes set activation ranges (ONNX Runtime's calibrators).",
        group="Optimization",
        details="OpenVINO takes minmax and percentile as NNCF's min-max and quantile range estimators.",
        default="minmax",
        show_default=True,
        policy="validation.calibration_method",
        stages=("optimize",),
        reproduce="optimization",
        choices=CALIBRATION_METHODS,
    ),
    RunOption(
        "keep_fp32",
        "--keep-fp32",
        "Comma-separated node-name or module-path patterns (fnmatch, e.g. 'encoder.layer.3.*') that INT8 and FP16 passes leave in FP32.",
        group="Optimization",
        details="The ONNX Runtime INT8 and FP16 passes and OpenVINO's INT8 take them. A failing reduced-precision artifact's report ranks its "
        "layers by sensitivity and names the ones to keep.",
        kind="comma-list",
        default=(),
        metavar="PATTERNS",
        policy="validation.keep_fp32",
        stages=("optimize",),
        reproduce="optimization",
    ),
    RunOption(
        "weight_group_size",
        "--weight-group-size",
        "Weights per quantization scale in the weight-only passes (int4, int8-weights, openvino:int4, openvino:int8-weights); -1: one per output channel.",
        group="Optimization",
        details="ONNX Runtime's MatMulNBits takes a power of two of 16 or more. Where a layer's input channels do not divide into "
        "groups of this size, NNCF uses the largest size that does (16 or more), and ONNX Runtime pads the last group; the report's "
        "weight compression record says which. openvino:int8-weights is per output channel whatever it says (NNCF has no INT8 groups).",
        type=int,
        default=128,
        show_default=True,
        metavar="N",
        policy="validation.weight_group_size",
        stages=("optimize",),
        reproduce="optimization",
        bounds=Bounds(-1),
    ),
    RunOption(
        "weight_ratio",
        "--weight-ratio",
        "Share of the layers openvino:int4 compresses to INT4, the most sensitive rest to INT8 (NNCF's mixed precision).",
        group="Optimization",
        details="1 puts every layer NNCF compresses in INT4. ONNX Runtime's int4 has no mixed precision: it compresses every MatMul "
        "with a constant weight, and a ratio below 1 with --optimize int4 alone is refused.",
        type=float,
        default=1.0,
        show_default=True,
        metavar="R",
        policy="validation.weight_ratio",
        stages=("optimize",),
        reproduce="optimization",
        bounds=Bounds(0, 1, low_open=True),
    ),
    RunOption(
        "accuracy",
        "--accuracy",
        'Accuracy budget, e.g. "cosine>=0.995" or "logits:top1>=0.98,rel_rms<=0.05", or a task metric\'s drop, e.g. '
        '"task_top1_drop<=0.5%".',
        group="Validation",
        details="A metric budget holds for FP16/INT8/INT4 artifacts; a task metric's drop (task_top1, task_top5, task_token_accuracy, "
        "task_exact_match, task_metric) holds for every artifact, on the labelled --data; task_perplexity_drop bounds the relative "
        "rise of a token task's perplexity (a decoder's text needs no labels: each next token is one). With a drop budget, openvino:int8 runs "
        "NNCF's accuracy control and ONNX Runtime's INT8 keeps its most sensitive nodes in FP32 until the drop holds.",
        kind="multiple",
        metavar="[OUTPUT:]BUDGET",
        policy="validation.accuracy",
        stages=("optimize", "validate"),
        reproduce="optimization",
    ),
    RunOption(
        "shape_ranges",
        "--shape-range",
        'Sizes a symbolic dim must support, e.g. "B=1..8..32,S=16..128..512" (TensorRT optimization profiles).',
        group="Validation",
        details="min, opt and max are validated; opt is the export size.",
        kind="multiple",
        metavar="SYMBOL=MIN..OPT..MAX",
        policy="validation.shape_ranges",
        stages=("reference", "export", "optimize", "validate"),
    ),
    RunOption(
        "benchmark",
        "--benchmark",
        "Measure the source model and every artifact that passed: p50/p90/p99 latency, throughput, peak memory.",
        group="Benchmark",
        kind="flag",
        default=False,
        reproduce="never",
        not_reproduced="a measurement, not how the artifact is made (the gate benchmarks when a budget asks)",
    ),
    RunOption(
        "threads",
        "--threads",
        "Intra-op threads every benchmarked runtime is pinned to (default: every core).",
        group="Benchmark",
        type=int,
        policy="benchmark.threads",
        reproduce="never",
        not_reproduced="a measurement setting",
        bounds=Bounds(1, 4096),
    ),
    RunOption(
        "benchmark_batch",
        "--benchmark-batch",
        "Batch size of the throughput measurement (the first input's leading symbolic dim).",
        group="Benchmark",
        type=int,
        default=8,
        show_default=True,
        policy="benchmark.batch",
        reproduce="never",
        not_reproduced="a measurement setting",
        bounds=Bounds(1, 1_000_000),
    ),
    RunOption(
        "benchmark_seconds",
        "--benchmark-seconds",
        "About how many seconds each measurement (latency, throughput) takes.",
        group="Benchmark",
        details="Spread over 20 interleaved rounds (at least one run a round, at most 500 runs).",
        type=float,
        default=2.0,
        show_default=True,
        policy="benchmark.seconds",
        reproduce="never",
        not_reproduced="a measurement setting",
        bounds=Bounds(0, 3600, low_open=True),
    ),
    RunOption(
        "opset",
        "--opset",
        "ONNX opset version (default: the exporter's).",
        group="Targets",
        type=int,
        policy="validation.opset",
        stages=("export", "optimize"),
        bounds=Bounds(1, 100),
    ),
    RunOption(
        "tolerances",
        "--tolerance",
        "Override the default tolerance (fp32: atol=1e-4, rtol=1e-3), for every output or one.",
        group="Validation",
        kind="multiple",
        metavar="[OUTPUT:]atol=A,rtol=R",
        policy="validation.tolerances",
        stages=("validate",),
        api="tolerance",
    ),
    RunOption(
        "samples",
        "--samples",
        "Input samples per shape.",
        group="Validation",
        type=int,
        default=3,
        show_default=True,
        policy="validation.samples",
        stages=("reference", "validate"),
        bounds=Bounds(1, 10_000),
    ),
    RunOption(
        "seed",
        "--seed",
        "Seed for the generated inputs.",
        group="Validation",
        type=int,
        default=0,
        show_default=True,
        policy="validation.seed",
        stages=("reference", "export", "validate"),
        bounds=Bounds(0, 2**32 - 1),
    ),
    RunOption(
        "allow_fixed_shapes",
        "--allow-fixed-shapes",
        "Accept an artifact that fixes a dim asked dynamic (its checks at other sizes are skipped); by default it fails.",
        group="Validation",
        kind="flag",
        default=False,
        policy="validation.allow_fixed_shapes",
        stages=("validate",),
    ),
    RunOption(
        "min_precision_share",
        "--min-precision-share",
        "The least share of multiply-accumulates a reduced-precision artifact must compute (weight-only: store) in its precision.",
        group="Validation",
        details="Measured from the artifact itself (its graph, IR or engine), not from the request; below it the artifact fails, "
        "and 0 judges nothing. Each artifact's report says what its matrix products compute in and store their weights in, "
        "by type, and, beside, what its runtime computes them in on the CPU.",
        type=float,
        default=0.5,
        show_default=True,
        metavar="SHARE",
        policy="validation.min_precision_share",
        stages=("validate",),
        bounds=Bounds(0, 1),
    ),
    RunOption(
        "unbuilt",
        "--unbuilt",
        "A requested --to format or --optimize pass that could not be built here fails the run by default (exit 1); warn "
        "passes it as PASSED WITH GAPS (exit 0).",
        group="Validation",
        details="E.g. trt:fp16 without TensorRT or a GPU. With fail the verdict names it and why; warn passes the run as PASSED WITH GAPS, "
        "listing it. --optimize auto's candidates never count.",
        default="fail",
        show_default=True,
        reproduce="never",
        not_reproduced="how the run is judged, not how an artifact is made",
        choices=UNBUILT_CHOICES,
    ),
    RunOption(
        "trust_code",
        "--trust-code",
        "Allow loading formats that run code on load (pickled modules, TorchScript, .pt2 "
        "with pickled parts, SavedModel folders, legacy .h5, .keras naming code outside Keras).",
        group="Security",
        kind="flag",
        default=False,
        policy="model.trust_code",
        stages=("load",),
    ),
    RunOption(
        "force",
        "--force",
        "Replace what an earlier run wrote in the output folder (never the model or any other input).",
        group="Output and report",
        kind="flag",
        default=False,
        reproduce="never",
        not_reproduced="the command writes to a folder of its own",
        recorded=False,
    ),
    RunOption(
        "stage_timeout",
        "--stage-timeout",
        "Fail a stage that runs longer than this; the run goes on.",
        group="Execution, cache and isolation",
        details="A stage is loading, an export, a validation, or a device's benchmark session (all its artifacts timed together).",
        type=float,
        default=3600.0,
        show_default=True,
        metavar="SECONDS",
        policy="validation.stage_timeout",
        reproduce="never",
        not_reproduced="a limit on the run, not how the artifact is made",
        bounds=Bounds(0, 7 * 24 * 3600, low_open=True),
    ),
    RunOption(
        "isolate",
        "--no-isolation",
        "Run the framework work in this process, without crash isolation or stage timeout (for debuggers and profilers; "
        "also: CONVERT_NO_ISOLATION=1).",
        group="Execution, cache and isolation",
        kind="negated-flag",
        default=True,
        reproduce="never",
        not_reproduced="where the work runs, not what it makes",
    ),
    RunOption(
        "cache",
        "--no-cache",
        "Run every stage even when a cached result exists (also: CONVERT_NO_CACHE=1).",
        group="Execution, cache and isolation",
        details="A result is reused only for an unchanged model, options and libraries.",
        kind="negated-flag",
        default=True,
        reproduce="never",
        not_reproduced="the cache reuses results, it never changes them",
    ),
    RunOption(
        "cache_dir",
        "--cache-dir",
        "Where cached artifacts and validation results live (default: $CONVERT_CACHE_DIR, else ~/.cache/convert).",
        group="Execution, cache and isolation",
        details="Deleting it is always safe.",
        type=PATH,
        metavar="FOLDER",
        reproduce="never",
        not_reproduced="the cache reuses results, it never changes them",
        recorded=False,
    ),
    RunOption(
        "report_json",
        "--report-json",
        "Where to write the JSON report (default: OUT/report.json).",
        group="Output and report",
        type=PATH,
        reproduce="never",
        not_reproduced="the command writes its report in its own folder",
        recorded=False,
    ),
)
BY_NAME = {option.name: option for option in OPTIONS}
# ConvertRequest's field defaults, by option name (the request's form)
DEFAULTS: MappingProxyType[str, Any] = MappingProxyType({option.name: option.default for option in OPTIONS})
# the Python API's keyword defaults, by keyword (convert.convert, convert.load)
API_DEFAULTS: MappingProxyType[str, Any] = MappingProxyType({option.keyword: option.default_on("api") for option in OPTIONS})


def check_bounds(request: Any) -> None:
    """Refuse a ConvertRequest (from the CLI or the API) whose bounded option is outside its bounds: the bounds a
    policy's schema holds its keys to (``policy_bounds``)."""
    for option in OPTIONS:
        value = getattr(request, option.name)
        if option.bounds is None or value is None or option.bounds.holds(value):
            continue
        default = f"leave it out for {number_text(option.default)}" if option.default is not None else "leave it out for the default"
        raise ConvertError(
            f"{option.flag} must be {option.bounds.requirement(value)}, not {number_text(value)}",
            f"Give {option.flag} a value {option.bounds.range_text()}, or {default}.",
        )


def policy_bounds(key: str) -> dict[str, float]:
    """The Field constraints of a promotion policy's key ("section.key"): its option's bounds."""
    bounds = next(option for option in OPTIONS if option.policy == key).bounds
    return bounds.constraints() if bounds else {}


def policy_default(key: str) -> Any:
    """The default of a promotion policy's key ("section.key"), as the policy spells it: a list for a tuple, a string for
    a path (relative to the policy file's folder, as every path in a policy)."""
    option = next(option for option in OPTIONS if option.policy == key)
    value = option.default_on("policy")
    if isinstance(value, tuple):
        return list(value)
    return os.fspath(value) if isinstance(value, os.PathLike) else value


CACHE_OPTIONS = ("cache", "cache_dir")  # the options every command that runs the pipeline shares


def click_options(names: tuple[str, ...] | None = None, formats: str = "", optimizers: str = "") -> Callable:
    """A decorator adding the click options of ``names`` (default: every option) in their declared order."""
    import click

    chosen = [BY_NAME[n] for n in names] if names is not None else list(OPTIONS)

    def decorate(command):
        for option in reversed(chosen):  # click lists options in the order their decorators are applied, outermost first
            text = option.help.replace("{formats}", formats).replace("{optimizers}", optimizers)
            if "{packagers}" in text:
                from convert.registry import REGISTRY

                text = text.replace("{packagers}", ", ".join(entry.name for entry in REGISTRY.entries("packager")))
            if option.kind in ("flag", "negated-flag"):
                command = click.option(option.flag, option.parameter, is_flag=True, default=option.click_default, help=text)(command)
                continue
            kind = click.Path(path_type=Path) if option.type is PATH else option.type
            if option.choices_from:
                from convert.registry import REGISTRY

                kind = click.Choice([entry.name for entry in REGISTRY.entries(option.choices_from)])
            elif option.choices:
                kind = click.Choice(option.choices)
            command = click.option(
                option.flag,
                option.parameter,
                type=kind,
                default=option.click_default,
                metavar=option.metavar,
                multiple=option.kind == "multiple",
                show_default=option.show_default,
                help=text,
            )(command)
        return command

    return decorate


# the options of a run that make artifacts: validating artifacts someone already has takes none of them
MAKES_ARTIFACTS = ("to", "optimize", "package", "opset", "calibration_data", "calibration_method", "keep_fp32", "unbuilt")


def from_cli(values: dict[str, Any]) -> dict[str, Any]:
    """ConvertRequest keywords from the click parameters of ``click_options`` (the others are left out)."""
    found: dict[str, Any] = {}
    for option in OPTIONS:
        if option.parameter in values:
            value = values[option.parameter]
            found[option.name] = (not value) if option.kind == "negated-flag" else option.to_request(value)
    return found


def from_api(values: dict[str, Any]) -> dict[str, Any]:
    """ConvertRequest keywords from the Python API's keywords."""
    return {option.name: option.to_request(values[option.keyword]) for option in OPTIONS if option.keyword in values}


def from_policy(policy: Any) -> dict[str, Any]:
    """ConvertRequest keywords from a promotion policy's keys (the options a policy does not name keep their defaults).
    ``policy`` is a convert.policy.Policy, read by each option's key path: the options sit below the policy and the
    pipeline, which import them."""
    found: dict[str, Any] = {}
    for option in OPTIONS:
        if option.policy is None:
            continue
        value: Any = policy
        for part in option.policy.split("."):
            value = getattr(value, part)
        found[option.name] = option.to_request(value)
    return found


def record(request: Any) -> dict[str, Any]:
    """The report's ``options``: every option's value in a ConvertRequest, as JSON (the output paths and the API-only
    objects left out)."""
    return {option.name: _json(getattr(request, option.name)) for option in OPTIONS if option.recorded}


def digest(request: Any, stage: Stage) -> str:
    """A digest of every option of a ConvertRequest that changes the results of ``stage``, for its cache key."""
    values = {option.name: _json(getattr(request, option.name)) for option in OPTIONS if stage in option.stages}
    return hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()


def is_object(value: Any) -> bool:
    """A value only Python can pass (a params pytree, example arrays): it has no spelling on a command line."""
    if isinstance(value, (tuple, list)):
        return not all(isinstance(item, str) for item in value)
    return not isinstance(value, (str, os.PathLike, int, float, bool, type(None)))


def _json(value: Any) -> Any:
    if is_object(value):
        return None
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, os.PathLike):
        return str(value)
    return value
