"""Log a report to MLflow as one run: the verdict as tags, the measurements as metrics, the files as artifacts.

The run goes to the tracking URI in effect (``MLFLOW_TRACKING_URI``, else MLflow's default) and the experiment
in effect (``MLFLOW_EXPERIMENT_NAME``, else MLflow's default experiment).
"""

from __future__ import annotations

import re
from pathlib import Path

from convert.errors import ConvertError, require
from convert.reports.model import Report

TAG_LIMIT = 5000  # MLflow's longest tag value


def local_store() -> list[Path]:
    """The file or folder of the tracking store in effect when it is local (``file:``, ``sqlite:``, a plain path)."""
    from urllib.parse import urlparse

    mlflow = require("mlflow", "--mlflow")
    uri = mlflow.get_tracking_uri()
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        return [Path(parsed.path or uri)]
    if parsed.scheme == "sqlite" and uri.startswith("sqlite:///"):
        return [Path(uri.removeprefix("sqlite:///"))]  # sqlite:///relative.db, sqlite:////absolute.db
    return []


def log_run(report: Report, report_path: Path, renderings: list[Path]) -> str:
    """Start a run, log everything, and return its run id."""
    mlflow = require("mlflow", "--mlflow")
    verdict = report.gate
    source = Path(report.source.path or "model").name
    try:
        # inside a pipeline's own run, the gate's run is a child of it (MLflow refuses a second active run)
        with mlflow.start_run(run_name=f"convert {source}", nested=mlflow.active_run() is not None) as run:
            tags = {
                "convert.tool_version": report.tool_version,
                "convert.schema_version": report.schema_version,
                "convert.passed": str(report.passed).lower(),
                "convert.source_sha256": report.source.sha256 or "",
            }
            if verdict is not None:
                tags.update(
                    {
                        "convert.decision": verdict.decision,
                        "convert.exit_code": str(verdict.exit_code),
                        "convert.reasons": "\n".join(f"[{r.code}] {r.artifact}: {r.message}" for r in verdict.reasons)[:TAG_LIMIT],
                    }
                )
            mlflow.set_tags(tags)
            mlflow.log_params(_params(report))
            mlflow.log_metrics(metrics(report))
            mlflow.log_artifact(str(report_path))
            for path in renderings:
                mlflow.log_artifact(str(path), artifact_path="reports")
            for artifact in report.artifacts:
                if artifact.path and Path(artifact.path).exists():
                    folder = f"artifacts/{_key(artifact.key)}"
                    if Path(artifact.path).is_dir():
                        mlflow.log_artifacts(artifact.path, artifact_path=f"{folder}/{Path(artifact.path).name}")
                    else:
                        for name in artifact.files or [Path(artifact.path).name]:
                            mlflow.log_artifact(str(Path(artifact.path).parent / name), artifact_path=folder)
            return run.info.run_id
    except (mlflow.exceptions.MlflowException, OSError) as exc:
        raise ConvertError(
            f"MLflow refused the run at {mlflow.get_tracking_uri()}: {(str(exc).splitlines() or [type(exc).__name__])[0]}",
            "Check MLFLOW_TRACKING_URI (and, for a file store with MLflow 3.7 or later, MLFLOW_ALLOW_FILE_STORE=true); "
            "the report and artifacts were written locally all the same.",
        ) from None


def metrics(report: Report) -> dict[str, float]:
    """Sizes, worst accuracy per output, latency and throughput per runtime and device, and the verdict as 1/0."""
    values: dict[str, float] = {"passed": float(report.passed)}
    if report.gate is not None:
        values.update({"gate.promoted": float(report.gate.promoted), "gate.reasons": float(len(report.gate.reasons))})
    for artifact in report.artifacts:
        if artifact.path is None:
            continue
        key = _key(artifact.key)
        values[f"{key}.size_mb"] = artifact.size_bytes / 1e6
        for check in artifact.checks:
            for output in check.outputs:
                name = f"{key}.{_key(output.name)}"
                if output.max_abs_error is not None:
                    values[f"{name}.max_abs_error"] = max(values.get(f"{name}.max_abs_error", 0.0), output.max_abs_error)
                if output.cosine_similarity is not None:
                    values[f"{name}.cosine_min"] = min(values.get(f"{name}.cosine_min", 1.0), output.cosine_similarity)
        for bench in artifact.benchmarks:
            for metric in ("latency_ms_p50", "latency_ms_p99", "throughput_per_s"):
                if getattr(bench, metric) is not None:
                    values[f"{key}.{bench.runtime}.{bench.device}.{metric}"] = getattr(bench, metric)
    return values


def _params(report: Report) -> dict[str, str]:
    params = {
        "source": report.source.path or "",
        "framework": report.source.framework or "",
        "to": ",".join(report.options.get("to", [])),
        "optimize": ",".join(report.options.get("optimize", [])),
    }
    if report.gate is not None:
        params.update({"policy": report.gate.policy, "required_devices": ",".join(report.gate.required_devices)})
    return params


def _key(name: str) -> str:
    """MLflow names allow letters, digits, _ - . / and spaces."""
    return re.sub(r"[^\w\-./ ]", "_", name)
