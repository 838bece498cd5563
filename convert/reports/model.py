"""The report schema. ``schema_version`` is MAJOR.MINOR: a minor version only adds fields (with defaults that say what
an older report did not record); a field removed, renamed or changing meaning is a major version. Which older versions
are read, and the functions that upgrade them, are in convert/reports/versions.py.

Statuses: a stage is ``ok``, ``failed`` or ``skipped``; a check and an output are ``passed``, ``failed``
or ``skipped``. A check that could not run is ``skipped`` with its ``reason``, never ``passed``.
"""

from __future__ import annotations

from typing import Literal, TypeVar, overload

from pydantic import BaseModel, Field, computed_field, field_validator

from convert.reports.details import (  # noqa: F401 (the details of an artifact, each kind with its render hooks, are the report's too)
    AccuracyControl,
    ArtifactDetail,
    ChainLink,
    ChainLinks,
    Delegation,
    Detail,
    Divergence,
    PrecisionAttestation,
    ProbePoint,
    Sensitivity,
    SensitivityRow,
    WeightCompression,
    known,
    parse_detail,
)
from convert.validators.compare import ERROR_HISTOGRAM_EDGES, OutputMetrics
from convert.validators.generation import GenerationMetrics
from convert.validators.task_metrics import describe_drop

SCHEMA_VERSION = "2.6"
D = TypeVar("D", bound=ArtifactDetail)


StageKind = Literal[
    "load",
    "reference",
    "export",
    "optimize",
    "auto",
    "validate",
    "localize",
    "accuracy-control",
    "sensitivity",
    "benchmark",
    "package",
    "assembled",
]
# the stages that make an artifact or a package: a failure of one is a failed run (exit code 2)
MAKING_KINDS: tuple[StageKind, ...] = ("export", "optimize", "package")
# the stages that make what --to and --optimize ask for: one that did not is in the report's ``unbuilt``
REQUESTED_KINDS: tuple[StageKind, ...] = ("export", "optimize")


class DeclaredShapeMismatch(BaseModel):
    """An input or output whose shape, as the artifact declares it, is not the shape it had in this check."""

    tensor: str
    role: Literal["input", "output"]
    declared: list[int | str | None] = Field(description="the declared shape: a size, a dim name, or null for an unnamed dynamic dim")
    shape: list[int] = Field(description="the shape it had")
    axis: int | None = Field(None, description="the axis that differs; null when the rank does")
    reason: str = ""


class TaskMetric(BaseModel):
    """One task metric on the labelled data: the source's, the artifact's, the drop, and the budget that judged it."""

    name: str = Field(description="top1, top5, token_accuracy, exact_match, perplexity, or metric (the user's --metric)")
    source: float
    artifact: float
    drop: float = Field(
        description="source - artifact, a fraction (0.005 is half a point); for perplexity the relative rise, artifact / source - 1"
    )
    budget: float | None = Field(None, description="the largest drop allowed (--accuracy task_NAME_drop<=...), None where none")
    status: Literal["passed", "failed", "not-budgeted"] = "not-budgeted"


class TaskResult(BaseModel):
    """The task metrics of one check on the labelled data."""

    output: str = Field("", description="the output the labels score")
    samples: int = 0
    metrics: list[TaskMetric] = []
    reason: str = Field("", description="why no metric could be computed")

    def describe(self) -> str:
        if not self.metrics:
            return f"task metrics not computed: {self.reason}"
        return "; ".join(
            f"{m.name} {m.artifact:.4f} vs the source's {m.source:.4f} ({describe_drop(m.name, m.drop)}"
            + (f", budget {m.budget * 100:.2f}" if m.budget is not None else "")
            + ")"
            for m in self.metrics
        )


class DataRecord(BaseModel):
    """The user's samples a run validated (or calibrated) on, and which of them it used."""

    role: Literal["validation", "calibration"]
    path: str
    kind: str = Field(description="npz-folder, npz, hf-datasets, or image-folder")
    sha256: str
    size: int = Field(description="samples in the dataset")
    used: list[int] = Field([], description="the indices of the samples used (chosen with the seed when fewer than size)")
    labelled: bool = False
    detail: str = Field("", description="the columns mapped to inputs, or an image folder's classes and preprocessing")
    source_task: dict[str, float] = Field({}, description="the source model's task metrics on the used samples")
    task_output: str = ""


class Check(BaseModel):
    runtime: str
    device: str
    shape: str = Field(description="the symbolic dim sizes of this check, e.g. 'B=1,S=5', or '*' when skipped before running")
    input_shapes: dict[str, list[int]] = {}
    samples: int = 0
    status: Literal["passed", "failed", "skipped"]
    reason: str = ""
    device_unsupported: bool = Field(
        False, description="skipped because the runtime never runs on this kind of device (TFLite on CUDA, TensorRT on CPU)"
    )
    seconds: float = 0.0
    outputs: list[OutputMetrics] = []
    declared_mismatches: list[DeclaredShapeMismatch] = Field(
        [], description="inputs and outputs whose declared shape does not hold at this shape (a failure of the check)"
    )
    kind: Literal["shape", "generation"] = Field(
        "shape", description="shape: one shape case's samples; generation: a decoder's greedy decoding with its cache fed back"
    )
    generation: GenerationMetrics | None = None
    task: TaskResult | None = Field(None, description="task metrics of a check on the labelled --data, with their drop from the source")
    memory_mapped: bool = Field(
        False,
        description="the runtime read the weights from their files as it used them (memory-mapped, ONNX Runtime's pre-packing "
        "off), because they take more than half the memory available",
    )


class Attempt(BaseModel):
    strategy: str
    status: Literal["ok", "failed"]
    seconds: float
    error: str = ""
    note: str = Field("", description="what a successful strategy found or changed on the way, e.g. a bound torch.export put on a dim")


class Benchmark(BaseModel):
    """Latency after warm-up at the export shape, throughput at a larger batch, and peak memory, of one runtime on one device."""

    runtime: str
    device: str
    status: Literal["ok", "failed", "skipped"] = "ok"
    reason: str = ""
    threads: int | None = Field(None, description="intra-op threads the runtime was pinned to; None where it cannot be set after start-up")
    shape: str = ""
    warmup: int = 0
    runs: int = 0
    latency_ms_p50: float | None = None
    latency_ms_p90: float | None = None
    latency_ms_p99: float | None = None
    latency_ms_interval: list[float] | None = Field(
        None, description="[low, high]: the 95% confidence interval of the p50, from the medians of the rounds"
    )
    latency_cv: float | None = Field(None, description="coefficient of variation of the rounds' medians")
    rounds: int = Field(0, description="interleaved rounds: in each, every benchmark of the session ran a block of runs in turn")
    round_ms: list[float] = Field([], description="each round's median latency; rounds of one session ran side by side (paired)")
    session: str = Field("", description="benchmarks with the same session were timed interleaved, round by round, in one process")
    unstable: bool = Field(False, description="the p50's interval is too wide to rank it against another figure: wider than 20% of the p50")
    compute_limit: str = Field("", description="why this artifact's precision cannot compute faster than FP32 on this device's CPU")
    computes: str = Field(
        "",
        description="what the runtime computes the artifact's matrix products in, measured on the CPU (its precision detail's "
        "runtime shares, else the artifact's own), e.g. 'int8 96.2%, fp32 3.8%'",
    )
    throughput_shape: str = ""
    throughput_per_s: float | None = Field(None, description="batch items per second at throughput_shape")
    throughput_interval: list[float] | None = Field(None, description="[low, high]: the 95% confidence interval of throughput_per_s")
    prefill_length: int | None = Field(
        None, description="a decoder's prefill: prompt tokens of its one call (batch 1, the cache empty); null for other models"
    )
    prefill_ms_p50: float | None = Field(None, description="p50 latency of the prefill call, ms, timed interleaved in rounds")
    prefill_ms_interval: list[float] | None = Field(
        None, description="[low, high]: the 95% confidence interval of prefill_ms_p50, from the medians of the rounds"
    )
    decode_steps: int | None = Field(
        None,
        description="a decoder's decode: tokens generated after the prefill, one a call, each call given the cache (present.*) "
        "the one before returned, then again from the prefill's cache; null for other models",
    )
    decode_tokens_per_s: float | None = Field(
        None,
        description="decode speed, batch 1: one over the p50 time of a decode step, over the steps of the decode (the cache "
        "prefill_length to prefill_length + decode_steps - 1 long)",
    )
    decode_tokens_per_s_interval: list[float] | None = Field(
        None, description="[low, high]: the 95% confidence interval of decode_tokens_per_s, from the medians of the rounds"
    )
    decode_round_ms: list[float] = Field(
        [], description="each round's median time of a decode step (one token), ms; rounds of one session ran side by side (paired)"
    )

    def spread(self) -> str:
        """The p50's 95% interval, and whether it is too wide to rank, for the renderings ("" where not measured)."""
        if self.latency_ms_interval is None:
            return ""
        low, high = self.latency_ms_interval
        return f"{low:.4g}–{high:.4g}" + (" unstable" if self.unstable else "")

    def prefill(self) -> str:
        """The prefill's p50 and its 95% interval, for the renderings ("" where not measured)."""
        if self.prefill_ms_p50 is None:
            return ""
        interval = f" ({self.prefill_ms_interval[0]:.4g}–{self.prefill_ms_interval[1]:.4g})" if self.prefill_ms_interval else ""
        return f"{self.prefill_ms_p50:.4g} ms{interval} at {self.prefill_length} tokens"

    def decode(self) -> str:
        """The decode's tokens per second and its 95% interval, for the renderings ("" where not measured)."""
        return decode_figure(self.decode_tokens_per_s, self.decode_tokens_per_s_interval, self.decode_steps)

    peak_memory_mb: float | None = Field(None, description="peak resident memory growth while measuring (see memory_scope)")
    memory_scope: str = ""


def decode_figure(per_s: float | None, interval: list[float] | None, steps: int | None) -> str:
    """'812 tok/s (790–830) over 32 steps': a decode's speed with its 95% interval ("" where not measured)."""
    if per_s is None:
        return ""
    spread = f" ({interval[0]:.4g}–{interval[1]:.4g})" if interval else ""
    return f"{per_s:.4g} tok/s{spread}" + (f" over {steps} steps" if steps else "")


class PairedRatio(BaseModel):
    """One benchmark's p50 over another's, from the ratios of their medians in the same rounds (timed interleaved)."""

    ratio: float
    interval: list[float] = Field(description="[low, high]: the 95% confidence interval of the ratio")
    rounds: int
    paired: bool = Field(True, description="false: not timed in one session, so the interval is that of the two p50s' intervals")
    within_noise: bool = Field(description="the interval holds 1: the two are as fast as each other within the noise")


class AutoCandidate(BaseModel):
    name: str = Field(description="the --optimize pass, or 'none' for the exported artifact itself")
    format: str
    precision: str = "fp32"
    computes: str = Field(
        "",
        description="what its matrix products compute in, measured (its precision detail's compute shares, e.g. 'int8 96.2%, fp32 3.8%')",
    )
    rank: int | None = None
    status: Literal["chosen", "lost", "failed", "skipped"]
    reason: str = ""
    device: str = ""
    latency_ms_p50: float | None = None
    latency_ms_interval: list[float] | None = None
    unstable: bool = False
    throughput_per_s: float | None = None
    speedup_vs_source: float | None = None
    vs_chosen: PairedRatio | None = Field(None, description="this candidate's p50 over the chosen one's, paired round by round")
    compute_limit: str = Field("", description="why its precision cannot compute faster than FP32 on this CPU")
    prefill_ms_p50: float | None = Field(None, description="a decoder's: the prefill's p50 (ms) of the benchmark it is ranked by")
    decode_tokens_per_s: float | None = Field(
        None, description="a decoder's: the decode speed it is ranked by (the fastest of its benchmarks), batch 1"
    )
    decode_tokens_per_s_interval: list[float] | None = Field(
        None, description="[low, high]: the 95% confidence interval of decode_tokens_per_s"
    )
    decode_speedup_vs_source: float | None = Field(None, description="decode_tokens_per_s over the source's own")
    decode_vs_chosen: PairedRatio | None = Field(
        None, description="a decoder's: its decode time per token over the chosen one's, paired round by round"
    )


# --optimize auto's criterion for a decoder (a source with a cache, timed as it generates)
DECODE_CRITERION = (
    "highest decode tokens per second (batch 1, the cache fed back step by step) among candidates that passed validation "
    "within their accuracy budget; where the fastest is as fast as a simpler candidate within the noise (their paired "
    "decode interval holds 1), the simpler one"
)


class AutoSelection(BaseModel):
    chosen: str | None = None
    criterion: str = Field(
        "lowest p50 latency at the export shape among candidates that passed validation within their accuracy budget; "
        "where the fastest is as fast as a simpler candidate within the noise (their paired interval holds 1), the simpler one",
        description="how the candidates were ranked: a decoder's by decode_tokens_per_s, any other model's by latency_ms_p50",
    )
    candidates: list[AutoCandidate] = []


class ArtifactRecord(BaseModel):
    format: str
    given: str = Field(
        "",
        description="the name of an artifact someone already had, validated as it is (convert validate, a policy's "
        "require.artifacts): never moved or changed; path is where it is",
    )
    optimization: str = Field("", description="the --optimize pass that made it from the artifact at derived_from")
    derived_from: str | None = None
    candidate: bool = Field(False, description="built by --optimize auto: published only when chosen")
    path: str | None = None
    files: list[str] = []
    sha256: str | None = None
    size_bytes: int = 0
    precision: str = "fp32"
    exporter: str = ""
    strategy: str = ""
    attempts: list[Attempt] = []
    dim_bounds: dict[str, list[int | None]] = Field(
        {},
        description="the sizes [min, max] the artifact takes for a dynamic dim, where it does not take every size "
        "(max null: no upper bound); its checks ran within them",
    )
    passed: bool = False
    fixed_dims: list[str] = Field(
        [], description="symbols asked dynamic that the artifact fixes: a failure unless fixed shapes are allowed"
    )
    repairs: list[str] = Field(
        [],
        description="what was changed in the artifact after its first validation, and why "
        "(e.g. a declared output dim made symbolic); its checks are those of the repaired artifact",
    )
    checks: list[Check] = []
    benchmarks: list[Benchmark] = []
    baseline_benchmarks: list[Benchmark] = Field(
        [], description="the gate baseline's artifact of the same key, timed interleaved with this one in this run"
    )
    reproduce: str = Field("", description="the command that reproduces this artifact")
    details: list[Detail] = Field(
        [],
        description="what a pass or a format found about the artifact, one of each kind at most, told apart by 'kind': "
        "divergence (where a failing artifact first goes wrong), sensitivity (a failing reduced-precision artifact's "
        "most sensitive nodes), accuracy_control (what an INT8 pass kept in FP32 for a task budget), delegation (an "
        "edge program's operators a backend runs, and those left portable), weight_compression (what a weight-only pass "
        "stored in how many bits), precision (what its matrix products compute in, and its pass's claim judged), chain (the "
        "error each link adds: source, captured program, artifact, each optimization)",
    )

    @field_validator("details", mode="before")
    @classmethod
    def _known_details(cls, details: object) -> object:
        return known(details) if isinstance(details, list) else details

    def task_checks(self) -> list[Check]:
        """The checks on the labelled --data, with their task metrics."""
        return [check for check in self.checks if check.task is not None]

    def diagnosis(self) -> list[str]:
        """What the report found about why it failed: each detail's diagnosis (where it diverged, which nodes to keep in FP32)."""
        return [line for detail in self.details for line in detail.diagnosis()]

    @overload
    def detail(self, kind: type[D]) -> D | None: ...
    @overload
    def detail(self, kind: str) -> ArtifactDetail | None: ...
    def detail(self, kind):
        """Its detail of a kind (a class, e.g. ``Divergence``, or its tag, e.g. ``"divergence"``), or None."""
        if isinstance(kind, str):
            return next((d for d in self.details if d.kind == kind), None)
        return next((d for d in self.details if isinstance(d, kind)), None)

    def add(self, detail: ArtifactDetail) -> ArtifactDetail:
        """Record ``detail`` in place of any detail of its kind (a record holds one of each); gives it back."""
        self.details = [d for d in self.details if d.kind != detail.kind] + [detail]
        return detail

    @property
    def key(self) -> str:
        """How the report, the gate and the renderings name it: the name it was given by, its optimization, else its format."""
        return self.given or self.optimization or self.format

    @property
    def build_kind(self) -> StageKind | None:
        """The kind of the stage that made it (its subject is the key); None for an artifact given as it is."""
        return None if self.given else ("auto" if self.candidate else "optimize") if self.optimization else "export"


class Stage(BaseModel):
    kind: StageKind
    subject: str = Field("", description="what the stage made or judged: 'onnx' of export, 'openvino:int8' of optimize, 'cpu' of benchmark")
    detail: str = Field("", description="what sets it apart from another stage of the same kind and subject, e.g. 'keeping 3 in FP32'")
    status: Literal["ok", "failed", "skipped"]
    seconds: float = 0.0
    error: str = ""
    reason: str = ""
    signal: str | None = Field(None, description="the signal that killed the worker process during this stage, e.g. SIGSEGV")
    timed_out: bool = Field(False, description="the stage ran past the stage timeout and its worker process was stopped")
    reused: bool = Field(False, description="every job of this stage was served from the cache (cache.reused lists each)")
    peak_rss_mb: float | None = Field(
        None,
        description="the largest peak resident memory (VmHWM) of this process and its worker while the stage ran, MB (Linux "
        "only); it counts the resident pages of memory-mapped weights, which the kernel reclaims under a memory limit",
    )

    @computed_field(description="how the stage is shown: KIND, KIND:SUBJECT or KIND:SUBJECT (DETAIL), e.g. 'optimize:openvino:int8'")
    @property
    def name(self) -> str:
        return f"{self.kind}{f':{self.subject}' if self.subject else ''}{f' ({self.detail})' if self.detail else ''}"

    @property
    def makes_artifact(self) -> bool:
        return self.kind in MAKING_KINDS


class Unbuilt(BaseModel):
    """An artifact the run was asked for (a --to format, an --optimize pass) and did not build. --optimize auto's
    candidates are never listed: it tries every pass, and those this machine cannot build are no request unmet."""

    artifact: str = Field(description="its key: a target format (onnx) or an optimization (trt:fp16)")
    stage: str = Field(description="the stage that did not build it, e.g. 'optimize:trt:fp16'")
    status: Literal["skipped", "failed"] = Field(
        description="skipped: it cannot be built on this machine (a package or a device it needs is absent, or the "
        "artifact it starts from was not made); failed: it was tried and failed"
    )
    reason: str
    accepted: bool = Field(
        False, description="--unbuilt warn accepted this skipped one: it does not fail the run (a failed one never is accepted)"
    )


def unbuilt_of(stages: list[Stage], accept_skipped: bool) -> list[Unbuilt]:
    """What the run was asked to build and did not: each export and --optimize stage that was skipped or failed (not
    the re-run of a pass with a detail, whose first artifact stands, nor --optimize auto's candidates)."""
    return [
        Unbuilt(
            artifact=stage.subject,
            stage=stage.name,
            status=stage.status,
            reason=stage.reason or stage.error,
            accepted=accept_skipped and stage.status == "skipped",
        )
        for stage in stages
        if stage.kind in REQUESTED_KINDS and not stage.detail and stage.status != "ok"
    ]


class PackageCheck(BaseModel):
    """One structural check of a package, made by reading it back as its consumer would."""

    name: str = Field(description="what was checked, e.g. 'archive', 'manifest', 'digest:onnx' (an artifact's bytes in it)")
    status: Literal["passed", "failed", "skipped"]
    reason: str = ""


class PackedArtifactRecord(BaseModel):
    """A validated artifact a package holds: its checks are the package's by digest."""

    key: str = Field(description="the artifact's key in the report: a format, a pass, or a given artifact's name")
    format: str
    sha256: str = Field(description="the digest its checks were made on; the package's digest check proves its bytes have it")
    passed: bool


class PackageRecord(BaseModel):
    """A package built from the run's validated artifacts (--package)."""

    packager: str
    path: str | None = None
    sha256: str | None = None
    size_bytes: int = 0
    artifacts: list[PackedArtifactRecord] = Field(
        [], description="the validated artifacts it holds, with the digests their checks were made on"
    )
    checks: list[PackageCheck] = []
    passed: bool = Field(False, description="every artifact it holds passed, and every structural check passed")

    def describe(self) -> str:
        """One sentence for every rendering: what it holds and how its checks went."""
        held = ", ".join(a.key for a in self.artifacts) or "no artifact"
        failed = [c for c in self.checks if c.status != "passed"]
        checks = (
            f"{len(self.checks)} structural checks passed" if not failed else "; ".join(f"{c.name} {c.status}: {c.reason}" for c in failed)
        )
        return f"{self.size_bytes / 1e6:.2f} MB, holds {held}; {checks}"


class CacheRebuild(BaseModel):
    stage: str
    reason: str = Field(description="why the cached entry was not trusted: partial, a file changed, other library versions")


class CacheRecord(BaseModel):
    """What the stage cache gave this run."""

    folder: str | None = None
    used: bool = False
    reason: str = Field("", description="why the cache was not used, when it was not")
    reused: list[str] = Field([], description="stage jobs served from the cache, e.g. 'export:onnx', 'validate:onnx onnxruntime cpu'")
    rebuilt: list[CacheRebuild] = Field([], description="cached entries that could not be trusted, so the job ran again")


class InputDomain(BaseModel):
    """What one input's generated values were drawn from, and why that (a run on --data samples does not use them)."""

    name: str
    drawn: str = Field(
        description="'uniform in [low, high)' (a float input with a domain), 'standard normal' (one without), 'integers low..high', "
        "'padding masks' (each row ones, then zeros), 'boxes ...' (ordered corners)"
    )
    low: float | None = None
    high: float | None = None
    source: str = Field(
        description="'given' (--input's {low..high}), what the model itself declares (\"the model's Rescaling layer ...\", "
        "\"the folder's preprocessor_config.json ...\"), 'the source's input specs' (token ids below the vocabulary size...), "
        "or 'default' (the model declares none)"
    )

    def describe(self) -> str:
        why = {"default": " (no range given or declared)", "given": ", as --input gives it"}.get(self.source, f", from {self.source}")
        return f"{self.name}: {self.drawn}{why}"


class SourceRecord(BaseModel):
    framework: str | None = None
    kind: str | None = None
    path: str | None = None
    sha256: str | None = None
    description: str = ""
    inputs: list[str] = []
    input_domains: list[InputDomain] = Field([], description="per input, the values its generated samples were drawn from, and why")
    outputs: list[str] = []


class CpuInfo(BaseModel):
    """The CPU and the instruction-set features that decide inference speed (convert/hardware.py)."""

    model: str = ""
    architecture: str = ""
    logical_cores: int = 1
    usable_cores: int = Field(1, description="the cores this process may run on (its affinity)")
    features: list[str] = Field(
        [], description="of avx2, fma, avx512f, avx512_vnni, avx_vnni, avx512_bf16, avx512_fp16, amx*, dotprod, i8mm, bf16, fp16, sve"
    )
    int8_compute: bool = Field(False, description="integer dot-product instructions: an INT8 artifact can compute faster than FP32")
    fp16_compute: bool = Field(False, description="FP16 arithmetic: an FP16 artifact can compute faster than FP32")
    known: bool = Field(False, description="the features were read from the operating system; false: unknown, nothing is inferred")

    def describe(self) -> str:
        features = ", ".join(self.features) if self.known else "features unknown"
        return (
            f"{self.model} ({self.architecture}), {self.usable_cores} of {self.logical_cores} cores; {features or 'no listed feature'}; "
            f"INT8 compute {'yes' if self.int8_compute else 'no'}, FP16 compute {'yes' if self.fp16_compute else 'no'}"
        )


class Environment(BaseModel):
    python: str
    platform: str
    cpu: CpuInfo | None = None
    benchmark_threads: int | None = Field(None, description="the intra-op threads every benchmark asked its runtime for")
    packages: dict[str, str] = {}
    outside_tested: dict[str, str] = Field(
        {}, description="installed packages whose version is outside the range this release was tested with, each with that range"
    )
    devices: list[str] = []
    device_names: list[str] = []
    memory_available_mb: float | None = Field(
        None, description="memory available to the run when it started, within its cgroup's limit where there is one, MB"
    )
    memory_limit_mb: float | None = Field(None, description="the cgroup memory limit the run ran under, MB; null where none")


class GateReason(BaseModel):
    """One reason a model was rejected."""

    code: Literal[
        "missing_artifact",
        "failed_check",
        "skipped_check",
        "missing_device",
        "nan_inf",
        "budget",
        "regression",
        "run_failed",
        "diverged",
        "precision",
        "missing_package",
        "failed_package",
        "missing_component",
        "rejected_component",
        "failed_assembled",
    ]
    artifact: str = Field(
        "", description="the artifact key: a target format (onnx) or an optimization (int8, openvino:fp16); a package's packager"
    )
    message: str


class BudgetResult(BaseModel):
    """One budget of the policy, judged on one measurement (an output of a check, a benchmark, a file size)."""

    artifact: str
    kind: Literal["accuracy", "latency", "throughput", "size"]
    metric: str = Field(
        description="cosine, rel_rms, top1, top5, max_abs, latency_ms_p50/p90/p99, throughput_per_s, prefill_ms_p50, "
        "decode_tokens_per_s or size_mb"
    )
    limit: str = Field(description="the bound, e.g. '<=5' or '>=0.999'")
    value: float | None = None
    output: str = ""
    runtime: str = ""
    device: str = ""
    shape: str = ""
    interval: list[float] | None = Field(None, description="latency, throughput: the measurement's 95% interval; judged on it")
    status: Literal["passed", "failed", "skipped"]
    reason: str = ""


class BaselineDelta(BaseModel):
    """One measurement compared with the baseline report: accuracy errors, latency or size of one artifact."""

    artifact: str
    kind: Literal["accuracy", "latency", "size"]
    metric: str = Field(description="max_abs_error, rel_rms_error, cosine_distance (1 - cosine), latency_ms_p50 or size_bytes")
    output: str = ""
    runtime: str = ""
    device: str = ""
    baseline: float | None = None
    current: float | None = None
    delta: float | None = Field(None, description="current - baseline")
    delta_pct: float | None = Field(None, description="100 * delta / baseline")
    allowed: str = Field("", description="the noise allowance: how much worse current may be, e.g. '+10% +0.05'")
    interval: list[float] | None = Field(
        None,
        description="latency: the 95% interval of current / baseline (side_by_side) or of the current p50; "
        "regressed only when all of it is beyond the allowance",
    )
    side_by_side: bool = Field(False, description="latency: the baseline's artifact was timed interleaved with this one in this run")
    status: Literal["ok", "improved", "regressed", "not_compared"]
    reason: str = ""


class BaselineComparison(BaseModel):
    path: str
    tool_version: str = ""
    created_at: str = ""
    source_sha256: str | None = None
    same_source: bool = Field(False, description="the baseline was made from a model file with the same sha256")
    same_environment: bool = Field(False, description="same platform and package versions: latency deltas are comparable")
    allowance: dict[str, float] = {}
    deltas: list[BaselineDelta] = []


class Verdict(BaseModel):
    """The gate's decision on a report: promote only when no reason to reject was found (fails closed)."""

    decision: Literal["promote", "reject"]
    promoted: bool
    exit_code: int = Field(description="0 promote, 1 reject")
    policy: str = Field(description="the policy file, or '<dict>' for a policy given from Python")
    report: str | None = Field(None, description="where the JSON report with this verdict was written")
    reasons: list[GateReason] = []
    notes: list[str] = Field([], description="what the policy allowed that would otherwise reject, e.g. an absent device it may skip")
    required_targets: list[str] = []
    required_optimizations: list[str] = []
    required_artifacts: list[str] = Field([], description="the artifacts given by path (require.artifacts) that had to pass")
    required_packages: list[str] = Field([], description="the packages (require.packages) that had to be built and pass")
    required_devices: list[str] = []
    budgets: list[BudgetResult] = []
    baseline: BaselineComparison | None = None
    mlflow_run_id: str | None = Field(None, description="the MLflow run the report was logged to (--mlflow)")

    def summary(self) -> str:
        if self.promoted:
            return "PROMOTE: every required artifact passed every check and budget"
        return f"REJECT: {len(self.reasons)} reason{'s' * (len(self.reasons) != 1)}"


class ComponentArtifact(BaseModel):
    """One artifact of a component, as its own report records it."""

    key: str = Field(description="its key in the component's report: a format, a pass")
    format: str
    path: str | None = Field(None, description="relative to this report's folder")
    precision: str = "fp32"
    passed: bool


class ComponentRecord(BaseModel):
    """One network of a model made of several, converted by a run of its own: what it is, and how its run ended."""

    name: str = Field(description="encoder, decoder, decoder_with_past; text_model, vision_model, joint; text_encoder, unet, vae_decoder")
    description: str = ""
    report: str | None = Field(
        None, description="the component's own report (every check, stage and benchmark), relative to this report's folder"
    )
    passed: bool = False
    exit_code: int | None = None
    error: str = Field("", description="why its run stopped, where it did")
    inputs: list[str] = []
    outputs: list[str] = []
    artifacts: list[ComponentArtifact] = []
    gate: Literal["promote", "reject"] | None = Field(None, description="the gate's verdict on the component's own report")


class AssembledCheck(BaseModel):
    """The components' artifacts run together, as the model is deployed, against the library's own assembled model (its
    generate, its pipeline, its joint similarity) on the same seeded inputs."""

    name: str = Field(
        description="generation (an encoder-decoder's greedy tokens), pipeline (a diffusion pipeline's image), similarity (a dual encoder's logits)"
    )
    artifact: str = Field(description="the artifact key each component contributed, e.g. 'onnx' or 'fp16'")
    artifacts: dict[str, str] = Field({}, description="component -> the artifact's path, relative to this report's folder")
    precision: str = "fp32"
    runtime: str = "onnxruntime"
    device: str = "cpu"
    status: Literal["passed", "failed", "skipped"]
    reason: str = Field("", description="why it failed or was skipped")
    metrics: dict[str, float] = Field({}, description="e.g. token_match, psnr_db, cosine, max_abs_error")
    budget: str = Field("", description="what it was judged on, e.g. 'psnr_db>=30, cosine>=0.999' or 'tokens equal'")
    diverged_at: str = Field("", description="the first step (a token, a denoising step) where the artifacts and the source part")
    blamed: list[str] = Field(
        [], description="components whose artifact alone, the others the source's own, fails the check: where to look first"
    )
    detail: str = ""
    seconds: float = 0.0


class Report(BaseModel):
    schema_version: str = SCHEMA_VERSION
    tool_version: str
    created_at: str
    command: str = ""
    passed: bool = False
    exit_code: int | None = None
    interrupted: bool = False
    error: str = ""
    isolation: str = Field("", description="where the framework work ran: a worker process (with its stage timeout), or in-process and why")
    source: SourceRecord = SourceRecord()
    notes: list[str] = Field(
        [],
        description="what the user should know that is no failure, e.g. that every input shape was fixed, "
        "so one shape was validated, and how to make a dim dynamic",
    )
    environment: Environment
    options: dict = {}
    out: str = Field(
        "", description="the output folder the run wrote to, absolute: a baseline report moved with it still finds its artifacts"
    )
    calibration: str = Field("", description="where the calibration feeds of INT8 passes came from")
    data: list[DataRecord] = Field([], description="the user's datasets the run validated and calibrated on")
    cache: CacheRecord = CacheRecord()
    stages: list[Stage] = []
    unbuilt: list[Unbuilt] = Field(
        [],
        description="what --to and --optimize asked for and the run did not build, with why: each fails the run "
        "(exit code 1, 2 where it failed) unless accepted (--unbuilt warn, a skipped one), and the verdict names each",
    )
    artifacts: list[ArtifactRecord] = []
    source_benchmark: list[Benchmark] = Field([], description="the source framework's own run, measured like the artifacts")
    auto: AutoSelection | None = None
    packages: list[PackageRecord] = Field([], description="what --package built from the validated artifacts")
    error_histogram_edges: list[float] = Field(ERROR_HISTOGRAM_EDGES, description="lower edges of every output's error_histogram bins")
    gate: Verdict | None = Field(None, description="the promotion gate's verdict, when the report was made by 'convert gate'")
    composite: Literal["", "encoder-decoder", "dual-encoder", "diffusion-pipeline"] = Field(
        "", description="encoder-decoder, dual-encoder or diffusion-pipeline: a model of several networks, each a component"
    )
    components: list[ComponentRecord] = Field([], description="a composite's components, each converted by a run with its own report")
    assembled: list[AssembledCheck] = Field([], description="a composite's components run together against the source's assembled model")

    def stage(self, kind: StageKind, subject: str = "") -> Stage | None:
        """The stage of this kind and subject (its first, without a detail: an INT8 pass's re-run keeping nodes in FP32
        is another stage of the same subject), or None."""
        return next((s for s in self.stages if s.kind == kind and s.subject == subject and not s.detail), None)

    def task_rows(self) -> list[tuple[ArtifactRecord, Check, TaskMetric]]:
        """Every task metric of every check on the labelled data, with its artifact and check, in report order."""
        return [
            (artifact, check, metric) for artifact in self.artifacts for check in artifact.task_checks() for metric in check.task.metrics
        ]

    def to_json(self) -> str:
        return self.model_dump_json(indent=2)

    @classmethod
    def from_json(cls, text: str, name: str = "the report") -> Report:
        """The report a JSON text holds; a ConvertError for JSON nested past any report's depth or no JSON at all,
        a pydantic ValidationError for JSON that is no report."""
        from convert.readers import loads_json

        return cls.model_validate(loads_json(text, name, "Pass a report.json written by convert."))
