"""The report schema. ``schema_version`` changes whenever a field is removed or changes meaning.

Statuses: a stage is ``ok``, ``failed`` or ``skipped``; a check and an output are ``passed``, ``failed``
or ``skipped``. A check that could not run is ``skipped`` with its ``reason``, never ``passed``.
"""

from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel, Field

SCHEMA_VERSION = "1.1"


class OutputMetrics(BaseModel):
    name: str
    status: Literal["passed", "failed"]
    reason: str = ""
    expected_shape: list[int] | None = None
    shape: list[int] | None = None
    expected_dtype: str | None = None
    dtype: str | None = None
    elements: int = 0
    max_abs_error: float | None = None
    max_rel_error: float | None = Field(None, description="max |a-e| / max(|e|, atol/rtol): sound near zero")
    mismatch_count: int = 0
    cosine_similarity: float | None = None
    rel_rms_error: float | None = Field(None, description="||a-e|| / ||e||, for fp16 / int8 artifacts")
    top1_agreement: float | None = Field(None, description="fraction of rows whose argmax agrees (last axis), for fp16 / int8 artifacts")
    top5_agreement: float | None = Field(None, description="fraction of rows whose reference argmax is in the artifact's top 5 (last axis over 5)")
    nan_count: int = 0
    inf_count: int = 0
    atol: float | None = None
    rtol: float | None = None
    tolerance_source: str = ""
    budget: str = Field("", description="the accuracy budget that judged a reduced-precision output, e.g. 'cosine>=0.98,rel_rms<=0.2'")
    budget_source: str = ""
    samples: int = 0


class Check(BaseModel):
    runtime: str
    device: str
    shape: str = Field(description="the symbolic dim sizes of this check, e.g. 'B=1,S=5', or '*' when skipped before running")
    input_shapes: dict[str, list[int]] = {}
    samples: int = 0
    status: Literal["passed", "failed", "skipped"]
    reason: str = ""
    seconds: float = 0.0
    outputs: list[OutputMetrics] = []


class Attempt(BaseModel):
    strategy: str
    status: Literal["ok", "failed"]
    seconds: float
    error: str = ""


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
    throughput_shape: str = ""
    throughput_per_s: float | None = Field(None, description="batch items per second at throughput_shape")
    peak_memory_mb: float | None = Field(None, description="peak resident memory growth while measuring (see memory_scope)")
    memory_scope: str = ""


class AutoCandidate(BaseModel):
    name: str = Field(description="the --optimize pass, or 'none' for the exported artifact itself")
    format: str
    precision: str = "fp32"
    rank: int | None = None
    status: Literal["chosen", "lost", "failed", "skipped"]
    reason: str = ""
    device: str = ""
    latency_ms_p50: float | None = None
    throughput_per_s: float | None = None
    speedup_vs_source: float | None = None


class AutoSelection(BaseModel):
    chosen: str | None = None
    criterion: str = "lowest p50 latency at the export shape among candidates that passed validation within their accuracy budget"
    candidates: list[AutoCandidate] = []


class ArtifactRecord(BaseModel):
    format: str
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
    passed: bool = False
    checks: list[Check] = []
    benchmarks: list[Benchmark] = []
    reproduce: str = Field("", description="the command that reproduces this artifact")


class Stage(BaseModel):
    name: str
    status: Literal["ok", "failed", "skipped"]
    seconds: float = 0.0
    error: str = ""
    reason: str = ""


class SourceRecord(BaseModel):
    framework: str | None = None
    kind: str | None = None
    path: str | None = None
    sha256: str | None = None
    description: str = ""
    inputs: list[str] = []
    outputs: list[str] = []


class Environment(BaseModel):
    python: str
    platform: str
    packages: dict[str, str] = {}
    devices: list[str] = []
    device_names: list[str] = []


class Report(BaseModel):
    schema_version: str = SCHEMA_VERSION
    tool_version: str
    created_at: str
    command: str = ""
    passed: bool = False
    exit_code: int | None = None
    interrupted: bool = False
    error: str = ""
    source: SourceRecord = SourceRecord()
    environment: Environment
    options: dict = {}
    calibration: str = Field("", description="where the calibration feeds of INT8 passes came from")
    stages: list[Stage] = []
    artifacts: list[ArtifactRecord] = []
    source_benchmark: list[Benchmark] = Field([], description="the source framework's own run, measured like the artifacts")
    auto: AutoSelection | None = None

    def to_json(self) -> str:
        return self.model_dump_json(indent=2)

    @classmethod
    def from_json(cls, text: str) -> "Report":
        return cls.model_validate(json.loads(text))
