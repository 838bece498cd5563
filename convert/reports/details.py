"""The details a pass or a format adds to an artifact's record (``ArtifactRecord.details``), one class per kind.

A kind is its fields, its ``kind`` tag (the discriminator of ``Detail``) and its render hooks, which every rendering
calls in one loop over ``record.details``; a new kind is one class here, added to ``BuiltInDetail``, and nothing else
(or, for a check registered outside the package, one class named by its ``CheckSpec.detail``):

- ``title``: how a rendering heads it ("where it diverged").
- ``describe()``: one sentence (the console, Markdown, JUnit, the HTML section's first line).
- ``diagnosis()``: the lines that explain why the artifact failed (empty for a detail that explains nothing): the
  console and Markdown show them among the failures, the gate in its ``diverged`` reason.
- ``located()``: whether it names the cause of the failure (the gate adds a ``diverged`` reason).
- ``notable()``: whether the short renderings (console, Markdown, JUnit) show it at all.
- ``testcase(checks)``: the check whose JUnit testcase carries it.
- ``html()``: its section of the artifact in the HTML report.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Annotated, ClassVar, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, PlainValidator, SerializeAsAny, TypeAdapter

import convert.reports.html_kit as kit
from convert.validators.compare import OutputMetrics
from convert.validators.task_metrics import drop_unit

if TYPE_CHECKING:  # the report's Check, for annotations only (convert/reports/model.py imports this module)
    from convert.reports.model import Check


class ArtifactDetail(BaseModel):
    """What every kind of detail has: its render hooks. A subclass declares ``kind: Literal["..."]`` and ``title``."""

    # a report's JSON always holds the kind, which tells the kinds apart: required in the schema, though set by default here
    model_config = ConfigDict(json_schema_extra=lambda schema, _: schema.update(required=[*schema.get("required", []), "kind"]))

    title: ClassVar[str]
    kind: str

    def describe(self) -> str:
        raise NotImplementedError

    def diagnosis(self) -> list[str]:
        """The lines that explain why the artifact failed; none where the detail explains no failure."""
        return []

    def located(self) -> bool:
        """Whether it names where the failure comes from (the gate's ``diverged`` reason)."""
        return False

    def notable(self) -> bool:
        """Whether the short renderings (console, Markdown, JUnit) show it; the JSON and the HTML report always hold it."""
        return True

    def testcase(self, checks: list[Check]) -> Check | None:
        """The check whose JUnit testcase carries it: the first that failed, else the first that passed."""
        return next((c for c in checks if c.status == "failed"), None) or next((c for c in checks if c.status == "passed"), None)

    def html(self) -> str:
        """Its section of the artifact in the HTML report: its title and its sentence."""
        return f"<h3>{kit.escape(self.title[:1].upper() + self.title[1:])}</h3><p>{kit.escape(self.describe())}</p>"


class ProbePoint(BaseModel):
    """One intermediate value of the artifact compared with the source's, in graph order."""

    value: str = Field(description="the tensor's name in the artifact's graph; a captured program's module (op_type 'module')")
    node: str
    op_type: str
    layer: str = Field("", description="the source-side name: module path, Keras layer, or source line")
    status: Literal["passed", "failed"]
    max_abs_error: float | None = None
    cosine_similarity: float | None = None


class Divergence(ArtifactDetail):
    """Where a failing artifact first goes wrong: the first intermediate value (in graph order) out of tolerance while
    every compared value before it is within."""

    title: ClassVar[str] = "where it diverged"
    kind: Literal["divergence"] = "divergence"
    status: Literal["found", "not-found", "skipped"]
    stage: Literal["conversion", "capture"] = Field(
        "conversion",
        description="capture: the program the exporter captured already computes other outputs than the source model "
        "(the difference is made before any graph node; layer names the first module whose output departs, where the "
        "program can be run module by module); conversion: a node of the graph is named",
    )
    reason: str = Field("", description="why nothing was named (not-found, skipped)")
    method: str = Field("", description="how the artifact's values were matched with the source's")
    runtime: str = ""
    device: str = ""
    shape: str = Field("", description="the shape case whose first sample was traced")
    value: str = ""
    node: str = ""
    op_type: str = ""
    layer: str = ""
    parameters: list[str] = Field([], description="the source's weights the divergent nodes read (initializer names)")
    region: list[str] = Field(
        [], description="the nodes between the last values within tolerance and the first out of it; the fault is among them"
    )
    inputs_within: list[str] = Field([], description="the compared values feeding the region, all within tolerance")
    metrics: OutputMetrics | None = None
    probes: list[ProbePoint] = Field([], description="every value compared, in graph order, up to the divergence's chunk")
    compared: int = 0
    matched: int = Field(0, description="intermediate values the source could name")
    chunks: int = Field(0, description="runs of source and artifact, each with a bounded number of values marked as outputs")
    reproducer: str = Field("", description="folder with the divergent subgraph, its inputs, the expected output and a script")
    reproduce: str = Field("", description="the command that shows the mismatch on the subgraph alone")
    seconds: float = 0.0
    peak_rss_bytes: int = Field(0, description="the worker's peak resident memory after localisation")

    def describe(self) -> str:
        """One sentence: where it diverged, or why that is not known."""
        if self.status != "found":
            return f"where it diverged is not known: {self.reason}"
        metrics = self.metrics
        error = f"max abs error {metrics.max_abs_error:.3g}" if metrics and metrics.max_abs_error is not None else "out of tolerance"
        if self.stage == "capture":
            module = (
                f", first in {self.layer}, whose output departs while every module or layer finished before it agrees" if self.layer else ""
            )
            return (
                f"the program the exporter captured already differs from the source model at output '{self.value}' ({error})"
                f"{module}: the difference is made when the model is captured (a branch on torch.onnx.is_in_onnx_export() "
                "or tf.executing_eagerly(), tracing-time Python state), not by converting its nodes"
            )
        cosine = f", cosine {metrics.cosine_similarity:.6f}" if metrics and metrics.cosine_similarity is not None else ""
        inputs = f" while its inputs {', '.join(self.inputs_within)} were within" if self.inputs_within else ""
        region = f" (region of {len(self.region)} nodes: {', '.join(self.region)})" if len(self.region) > 1 else ""
        layer = f" in layer {self.layer}" if self.layer else ""
        return f"first diverged at node {self.node} ({self.op_type}){layer}: value '{self.value}' {error}{cosine}{inputs}{region}" + (
            f"; reproducer: {self.reproduce}" if self.reproduce else ""
        )

    def diagnosis(self) -> list[str]:
        return [self.describe()]

    def located(self) -> bool:
        return self.status == "found"

    def testcase(self, checks: list[Check]) -> Check | None:
        """The check it traced; where none matches (skipped before tracing), the default."""
        traced = next((c for c in checks if (c.runtime, c.device, c.shape) == (self.runtime, self.device, self.shape)), None)
        return traced or super().testcase(checks)

    def html(self) -> str:
        facts = [("traced", kit.escape(f"{self.runtime} on {self.device} at {self.shape}; {self.method}"))]
        if self.status == "found":
            facts += [
                ("node", f"<code>{kit.escape(self.node)}</code> ({kit.escape(self.op_type)})"),
                ("layer", kit.escape(self.layer or "-")),
                ("value", f"<code>{kit.escape(self.value)}</code>"),
                ("inputs within tolerance", kit.escape(", ".join(self.inputs_within) or "-")),
                ("region", kit.escape(", ".join(self.region))),
                ("weights read", kit.escape(", ".join(self.parameters) or "-")),
            ]
            if self.reproduce:
                facts.append(("reproducer", f"<pre>{kit.escape(self.reproduce)}</pre>"))
        chunks = f"{self.chunks} chunk{'s' * (self.chunks != 1)}"
        facts.append(("compared", kit.escape(f"{self.compared} of {self.matched} named values in {chunks}, {self.seconds:.3g} s")))
        return "<h3>Where it diverged</h3>" + f"<p>{kit.escape(self.describe())}</p>" + kit.definitions(facts) + _divergence_svg(self)


class SensitivityRow(BaseModel):
    """The artifact's error at the outputs when only this node is reduced (the rest kept in FP32)."""

    node: str
    op_type: str
    layer: str = ""
    rel_rms_error: float | None = Field(None, description="the worst output's ||a-e|| / ||e||")
    cosine_similarity: float | None = Field(None, description="the worst output's cosine similarity")


class Sensitivity(ArtifactDetail):
    """Which nodes cost a reduced-precision artifact its accuracy, and which to keep in FP32 to meet the budget."""

    title: ClassVar[str] = "sensitivity"
    kind: Literal["sensitivity"] = "sensitivity"
    status: Literal["found", "not-found", "skipped"]
    reason: str = ""
    optimization: str = ""
    rows: list[SensitivityRow] = Field([], description="candidate nodes, the most sensitive first")
    candidates: int = Field(0, description="nodes the pass reduces; only the first max_candidates were measured")
    keep: list[str] = Field([], description="the fewest most-sensitive nodes that, kept in FP32, meet the budget")
    keep_layers: list[str] = []
    outputs: list[OutputMetrics] = Field([], description="the outputs with those nodes kept in FP32")
    suggestion: str = Field("", description="the option that builds it")
    drop: float | None = Field(None, description="under a task budget: the task metric's drop with the last set tried")
    seconds: float = 0.0

    def describe(self) -> str:
        if self.status == "skipped":
            return f"sensitivity not measured: {self.reason}"
        if self.status != "found":
            return f"no set of nodes kept in FP32 was found to meet the budget: {self.reason}"
        worst = ", ".join(f"{row.node} ({row.layer or row.op_type}, rel_rms {row.rel_rms_error:.3g})" for row in self.rows[:3])
        return f"most sensitive: {worst}; keeping {len(self.keep)} in FP32 meets the budget: {self.suggestion}"

    def diagnosis(self) -> list[str]:
        return [self.describe()]

    def located(self) -> bool:
        return self.status == "found"

    def html(self) -> str:
        rows = [
            (
                "failed" if row.node in self.keep else "",
                kit.cell(row.node)
                + kit.cell(row.op_type)
                + kit.cell(row.layer or "-")
                + kit.cell(kit.number(row.rel_rms_error), True)
                + kit.cell(kit.number(row.cosine_similarity, ".6f"), True)
                + kit.cell("keep in FP32" if row.node in self.keep else ""),
            )
            for row in self.rows
        ]
        table = kit.table(["node", "op", "layer", "rel_rms alone", "cosine alone", ""], rows) if rows else ""
        return "<h3>Sensitivity</h3>" + f"<p>{kit.escape(self.describe())}</p>" + table


class AccuracyControl(ArtifactDetail):
    """An INT8 pass run under a task-drop budget: the layers it kept in FP32 and why."""

    title: ClassVar[str] = "accuracy control"
    kind: Literal["accuracy_control"] = "accuracy_control"
    method: str = Field(description="e.g. NNCF quantize_with_accuracy_control, or ONNX Runtime exclusions by sensitivity")
    status: Literal["met", "not-met", "not-needed", "skipped"]
    reason: str = ""
    metric: str = ""
    budget: float | None = None
    plain_drop: float | None = Field(None, description="the drop of the plain INT8 artifact")
    drop: float | None = Field(None, description="the drop of the artifact with the kept layers")
    kept_fp32: list[str] = Field([], description="the nodes or operations left in FP32")
    seconds: float = 0.0

    def describe(self) -> str:
        if self.status in ("skipped", "not-needed"):
            return f"accuracy control {self.status}: {self.reason}"
        kept = f"kept {len(self.kept_fp32)} in FP32 ({', '.join(self.kept_fp32[:6])}{', ...' * (len(self.kept_fp32) > 6)})"
        drops = " → ".join(f"{d * 100:.2f}" for d in (self.plain_drop, self.drop) if d is not None)
        verdict = "met" if self.status == "met" else "not met"
        budget = "none" if self.budget is None else f"{self.budget * 100:.2f}"
        return f"{self.method}: {kept}; {self.metric} drop {drops}{drop_unit(self.metric)}, budget {budget} {verdict}" + (
            f" ({self.reason})" if self.reason else ""
        )


class Delegation(ArtifactDetail):
    """Which operators of an edge program a backend took over (delegated), and which stayed on the portable kernels."""

    title: ClassVar[str] = "delegated operators"
    kind: Literal["delegation"] = "delegation"
    backend: str = Field(description="e.g. XnnpackBackend")
    delegated: dict[str, int] = Field({}, description="operator -> how many of its calls the backend runs")
    portable: dict[str, int] = Field({}, description="operator -> how many of its calls run on the portable (non-delegated) kernels")
    share: float = Field(0.0, description="delegated calls / all operator calls, 0 to 1")

    def describe(self) -> str:
        portable = ", ".join(f"{op} x{n}" for op, n in sorted(self.portable.items())) or "none"
        return (
            f"{self.share * 100:.0f}% of {sum(self.delegated.values()) + sum(self.portable.values())} operator calls "
            f"delegated to {self.backend}; portable: {portable}"
        )


class WeightCompression(ArtifactDetail):
    """A weight-only pass: which layers' weights it stored in fewer bits, in groups of how many, and which it left."""

    title: ClassVar[str] = "weight compression"
    kind: Literal["weight_compression"] = "weight_compression"
    method: str = Field(description="e.g. ONNX Runtime MatMulNBitsQuantizer, or NNCF compress_weights(INT4_ASYM)")
    group_size: int = Field(description="weights per scale as asked; -1: one scale per output channel")
    ratio: float = Field(1.0, description="the share of the layers asked to be in the fewest bits (NNCF's mixed precision)")
    layers: dict[str, int] = Field(
        {}, description="compressed layers by their storage, e.g. {'int4, group 32': 12, 'int8, per channel': 2}"
    )
    uncompressed: int = Field(0, description="matrix products with a constant weight left in full precision")
    data_aware: list[str] = Field([], description="data-aware algorithms run on --calibration-data (AWQ, scale estimation)")
    notes: list[str] = Field([], description="what the pass did otherwise than asked, e.g. a group size adjusted to a layer's channels")

    def describe(self) -> str:
        stored = ", ".join(f"{count} in {storage}" for storage, count in self.layers.items()) or "none"
        group = "per output channel" if self.group_size == -1 else f"group size {self.group_size}"
        ratio = f", ratio {self.ratio:g}" if self.ratio < 1 else ""
        aware = f", data-aware: {', '.join(self.data_aware)}" if self.data_aware else ""
        notes = f" ({'; '.join(self.notes)})" if self.notes else ""
        return f"{self.method}, {group}{ratio}{aware}: layers {stored}; {self.uncompressed} left in full precision{notes}"


class PrecisionAttestation(ArtifactDetail):
    """What the artifact's matrix products compute in, measured from the artifact and its runtime (not from the request),
    and whether that meets the precision its pass claims."""

    title: ClassVar[str] = "what it computes in"
    kind: Literal["precision"] = "precision"
    status: Literal["passed", "failed", "skipped", "measured"] = Field(
        description="passed / failed: a reduced-precision claim met or missed by attested_share against threshold; measured: "
        "figures with no claim judged (an FP32 artifact, the threshold at 0, nothing the claim counts, or some of it unsized: "
        "reason); skipped: not measured (reason)"
    )
    claimed: str = Field(description="the precision the artifact's pass claims (the record's precision)")
    claim: Literal["compute", "weights"] = Field(
        "compute",
        description="what the claim names: the arithmetic of its matrix products (compute), or only how their weights are stored "
        "(weights: a weight-only pass, or OpenVINO's FP16 compression, whose arithmetic the runtime chooses)",
    )
    attested_share: float | None = Field(
        None, description="the share of multiply-accumulates (of those with a stored weight, for a weights claim) in the claimed precision"
    )
    threshold: float = Field(0.0, description="the least attested_share that passes (--min-precision-share)")
    measured: str = Field("", description="what was read: the artifact's graph or program, and at which shapes")
    shape: str = Field(
        "",
        description="the validated shape case whose input shapes the products were sized at, or the sizes an artifact that "
        "stores its own was sized at (a .pte: its dims, each dynamic one at its bound)",
    )
    macs: int = Field(0, description="multiply-accumulates of the counted products at that shape")
    products: int = Field(0, description="matrix products (convolutions, matrix multiplications, Gemm, quantized forms) counted")
    unsized: int = Field(0, description="products whose size is not known: shares are by layer where none is")
    compute: dict[str, float] = Field({}, description="type -> share of multiply-accumulates whose arithmetic runs in it")
    weights: dict[str, float] = Field(
        {}, description="type -> share of multiply-accumulates (of products with a stored weight) whose weight is stored in it"
    )
    casts: int = Field(0, description="Cast nodes in the artifact's graph")
    runtime: str = Field("", description="whose view runtime_compute is, e.g. 'onnxruntime on cpu'")
    runtime_compute: dict[str, float] = Field(
        {}, description="type -> share of multiply-accumulates the runtime computes in (it may cast what the artifact describes)"
    )
    runtime_note: str = Field("", description="why the runtime computes otherwise than the artifact describes, or was not measured")
    reason: str = Field("", description="why it was skipped, or why a measured claim was not judged")
    seconds: float = 0.0

    def describe(self) -> str:
        from convert.precision import figure, macs_text, percent

        if self.status == "skipped":
            return f"what it computes in was not measured: {self.reason}"
        size = f"{macs_text(self.macs)} in {self.products} products" if self.macs else f"{self.products} products, shares by layer"
        verdict = ""
        if self.status in ("passed", "failed") and self.attested_share is not None:
            of = " (weights)" if self.claim == "weights" else ""
            verdict = (
                f"{self.claimed}{of} claim {'met' if self.status == 'passed' else 'missed'}, "
                f"{percent(self.attested_share)} {'>=' if self.status == 'passed' else '<'} {self.threshold * 100:g}%: "
            )
        weights = f"; weights {figure(self.weights)}" if self.weights else ""
        runtime = f"; {self.runtime}: {figure(self.runtime_compute)}" if self.runtime and self.runtime_compute else ""
        note = f" ({self.runtime_note})" if self.runtime_note else ""
        unjudged = f"; {self.reason}" if self.reason else ""
        return f"{verdict}compute {figure(self.compute)}{weights}{runtime}{note}; {size} at {self.shape}, from {self.measured}{unjudged}"

    def testcase(self, checks: list[Check]) -> Check | None:
        """None: JUnit has a test case of its own for the claim (``convert.KEY.precision``)."""
        return None

    def notable(self) -> bool:
        """A claim missed, a reduced precision not measured or not judged, or an unjudged artifact whose runtime computes
        otherwise than it describes. A claim met is in the JSON and HTML reports, the auto table and the benchmarks'
        notes, not a line of its own: an FP32 artifact computing in FP32, or an INT8 one in INT8, says nothing new."""
        if self.status == "measured":
            differs = bool(self.runtime_compute) and self.runtime_compute.keys() != self.compute.keys()
            return differs or bool(self.reason)
        if self.status == "skipped":
            return self.claimed not in ("fp32", "fp64")
        return self.status == "failed"

    def diagnosis(self) -> list[str]:
        if self.status != "failed" or self.attested_share is None:
            return []
        from convert.precision import accepted, percent

        found = self.weights if self.claim == "weights" else self.compute
        other, share = next(((kind, share) for kind, share in found.items() if kind not in accepted(self.claimed)), ("fp32", 0.0))
        what = "stores the weights of" if self.claim == "weights" else "computes"
        return [
            f"{what} {percent(share)} of its multiply-accumulates in {other} and {percent(self.attested_share)} in {self.claimed}, below the "
            f"{self.threshold * 100:g}% its {self.claimed} claim needs: it is not the {self.claimed} model it says it is (lower "
            "--min-precision-share, or the policy's validation.min_precision_share, to accept it)"
        ]


# every kind, told apart by its ``kind`` field in the report's JSON
class ChainLink(BaseModel):
    """One link of an artifact's chain: the error its step adds, its two ends run on the same sample."""

    link: Literal["capture", "conversion", "optimization"] = Field(
        description="capture: the source model → the program its exporter captured; conversion: that program → the exported "
        "artifact (the artifact itself where it is that program: capture is then its one link); optimization: the pass's "
        "base artifact → its output"
    )
    step: str = Field(description="what made the link's end: the export strategy, or the pass")
    compares: str = Field(description="the link's two ends, in words")
    status: Literal["measured", "skipped"]
    reason: str = Field("", description="why it was skipped, or what an end lacked (an output missing on one side)")
    max_abs_error: float | None = Field(None, description="the largest absolute difference over every output")
    worst_output: str = Field("", description="the output with that difference")
    cosine_similarity: float | None = Field(None, description="the lowest over the outputs")
    within_tolerance: bool | None = Field(
        None, description="every output within the tolerance of the link's end (its precision's), as validation judges one"
    )

    def text(self) -> str:
        label = self.step if self.link == "optimization" else self.link
        if self.status == "skipped":
            return f"{label} not measured ({self.reason})"
        error = "no float output" if self.max_abs_error is None else f"{self.max_abs_error:.3g}"
        beyond = "" if self.within_tolerance else " (out of tolerance)"
        return f"{label} {error}{beyond}"


class ChainLinks(ArtifactDetail):
    """The error each link of the artifact's chain adds (source → captured program → artifact → each optimization), on
    the first sample of its first shape case that ran: which link made what its checks saw. Figures, never a verdict."""

    title: ClassVar[str] = "error link by link"
    kind: Literal["chain"] = "chain"
    shape: str = Field("", description="the shape case whose first sample ran through every link")
    runtime: str = Field("", description="the runtime that ran the artifact's end (on the CPU)")
    links: list[ChainLink] = Field([], description="from the source to this artifact; an optimized artifact's base's links first")
    seconds: float = 0.0

    def describe(self) -> str:
        return f"max abs error each link adds, at {self.shape}: " + ", ".join(link.text() for link in self.links)

    def notable(self) -> bool:
        """A link out of tolerance: which one made the difference. A chain within tolerance is in the JSON and HTML."""
        return any(link.status == "measured" and not link.within_tolerance for link in self.links)

    def testcase(self, checks: list[Check]) -> Check | None:
        return next((c for c in checks if c.status == "failed"), None)


BuiltInDetail = Annotated[
    AccuracyControl | ChainLinks | Delegation | Divergence | PrecisionAttestation | Sensitivity | WeightCompression,
    Field(discriminator="kind"),
]
_BUILT_IN: TypeAdapter[ArtifactDetail] = TypeAdapter(BuiltInDetail)
KINDS: tuple[str, ...] = tuple(kind.model_fields["kind"].default for kind in get_args(get_args(BuiltInDetail)[0]))


def registered() -> dict[str, type[ArtifactDetail]]:
    """The kinds the registered checks record beyond the built-in ones (a plugin's check names its detail class in its
    spec, convert/registry.py CheckSpec), by their ``kind``."""
    from convert.registry import REGISTRY, load_target

    found = (load_target(spec.detail) for spec in REGISTRY.entries("check") if spec.detail)
    return {kind.model_fields["kind"].default: kind for kind in found if kind.model_fields["kind"].default not in KINDS}


def known(details: list) -> list:
    """The JSON of a record's details less those of a kind a newer minor version of the report added, or a check this
    process has not registered, which this one does not know (a minor version only adds what an older reader may leave
    out)."""
    kinds = (*KINDS, *registered())
    return [d for d in details if not (isinstance(d, dict) and isinstance(d.get("kind"), str) and d["kind"] not in kinds)]


def parse_detail(data: object) -> ArtifactDetail:
    """A detail from its JSON, of the kind its ``kind`` names: a built-in kind, or one a registered check records."""
    if isinstance(data, ArtifactDetail):
        return data
    kind = registered().get(data.get("kind")) if isinstance(data, dict) else None
    return kind.model_validate(data) if kind is not None else _BUILT_IN.validate_python(data)


# A record's details: read by their kind (the registered checks' kinds too), written as their own class, and described
# in the report's JSON schema by the built-in kinds (a check registered elsewhere adds its kind to the reports it writes)
Detail = Annotated[SerializeAsAny[ArtifactDetail], PlainValidator(parse_detail, json_schema_input_type=BuiltInDetail)]


def _divergence_svg(found: Divergence) -> str:
    """The max abs error of every compared value in graph order (log axis), the first failing one marked."""
    points = [(i, p) for i, p in enumerate(found.probes) if p.max_abs_error is not None]
    if len(points) < 2:
        return ""
    width, height = 700, 240
    left, right, top, bottom = 56, 12, 16, 40
    plot_width, plot_height = width - left - right, height - top - bottom
    floor = 1e-10
    logs = [math.log10(max(p.max_abs_error, floor)) for _, p in points]
    low, high = math.floor(min(logs)), math.ceil(max(logs)) + (1 if math.ceil(max(logs)) == math.floor(min(logs)) else 0)

    def xy(index: int, log: float) -> tuple[float, float]:
        x = left + plot_width * index / max(1, len(found.probes) - 1)
        return x, top + plot_height * (1 - (log - low) / (high - low))

    parts = []
    for decade in range(low, high + 1):
        _, y = xy(0, decade)
        parts.append(kit.svg_line(left, y, left + plot_width, y, kit.GRID_COLOR))
        parts.append(kit.svg_text(left - 6, y + 4, f"1e{decade}", anchor="end", size=10, css="axis"))
    coordinates = [xy(i, log) for (i, _), log in zip(points, logs)]
    parts.append(
        '<polyline fill="none" stroke="'
        + kit.BAR_COLOR
        + '" stroke-width="1.5" points="'
        + " ".join(f"{x:.1f},{y:.1f}" for x, y in coordinates)
        + '"/>'
    )
    for (x, y), (_, probe) in zip(coordinates, points):
        color = kit.FAIL_COLOR if probe.status == "failed" else kit.BAR_COLOR
        tooltip = f"{probe.node} ({probe.op_type}) {probe.layer}: {probe.max_abs_error:.3g}"
        parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{color}"><title>{kit.escape(tooltip)}</title></circle>')
    parts.append(kit.svg_line(left, top + plot_height, left + plot_width, top + plot_height, kit.AXIS_COLOR))
    parts.append(kit.svg_text(left + plot_width / 2, height - 8, "intermediate values in graph order", size=10, css="axis"))
    parts.append(
        kit.svg_text(
            12,
            top + plot_height / 2,
            "max abs error",
            size=10,
            css="axis",
            extra=f' transform="rotate(-90 12 {top + plot_height / 2:.1f})"',
        )
    )
    return kit.svg(width, height, "divergence", "max abs error along the graph", parts)
