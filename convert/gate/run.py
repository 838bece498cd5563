"""``convert gate``: load the policy and the baseline report, run the conversion the policy describes with the gate's
hooks (its reads and writes checked against each other, the baseline's artifacts timed beside the new ones, the
verdict written into the report), then publish the renderings and the MLflow run."""

from __future__ import annotations

import os
from pathlib import Path

from convert import options
from convert.errors import require
from convert.gate.baseline import has_benchmarks, load_report
from convert.gate.judge import judge
from convert.pipeline import ConvertRequest, Progress, RunHooks
from convert.pipeline import run as run_pipeline
from convert.policy import Allowance, Policy, load_policy
from convert.protected_inputs import Write, reads_of, refuse_writes_to_inputs
from convert.reports import model as rm
from convert.reports.render import check_writable, render_files


def gate(
    policy: str | os.PathLike | dict,
    *,
    baseline: str | os.PathLike | None = None,
    out: str | os.PathLike | None = None,
    force: bool = False,
    html: str | os.PathLike | None = None,
    markdown: str | os.PathLike | None = None,
    junit: str | os.PathLike | None = None,
    mlflow: bool = False,
    progress: Progress | None = None,
    command: str = "",
    cache: bool = True,
    cache_dir: str | os.PathLike | None = None,
) -> rm.Verdict:
    """Run the conversion a policy describes and return the verdict, written into the report as ``gate``.

    ``baseline`` (a report JSON) overrides the policy's ``baseline.report``; ``out`` its ``out`` folder. ``html``,
    ``markdown`` and ``junit`` are paths to render the report to; ``mlflow`` logs it as a run; ``cache`` and
    ``cache_dir`` as for ``convert.convert``. Raises
    ``ConvertError`` for a bad policy, baseline or model (exit code 2 on the command line)."""
    policy_model, name = load_policy(policy)
    configured = policy_model.baseline.report if policy_model.baseline else None
    baseline_path = Path(baseline) if baseline is not None else Path(configured) if configured else None
    allowance = policy_model.baseline.allowance if policy_model.baseline else Allowance()
    check_writable(_path(html), _path(markdown), _path(junit))
    if mlflow:
        require("mlflow", "--mlflow")
    reads = reads_of(policy=policy if isinstance(policy, (str, os.PathLike)) else None, baseline_report=baseline_path)
    writes = [
        Write(f"the {what} rendering", Path(path))
        for what, path in (("HTML", html), ("Markdown", markdown), ("JUnit", junit))
        if path is not None
    ]
    if mlflow:
        from convert.mlflow_log import local_store

        writes += [Write("MLflow's local store", store) for store in local_store()]
    # before the baseline is read; the run checks its own outputs against all of these again
    refuse_writes_to_inputs(writes, [*reads, *reads_of(policy_model.model.path, weights=policy_model.model.weights)])
    # read before the run: a bad baseline must not cost a conversion
    baseline_report = load_report(baseline_path) if baseline_path is not None else None
    request = _request(
        policy_model,
        Path(out) if out is not None else Path(policy_model.out),
        force,
        command,
        benchmark=policy_model.timed() or has_benchmarks(baseline_report),
    )
    request.cache, request.cache_dir = cache, _path(cache_dir)

    def verdict_of(report: rm.Report, report_path: Path) -> rm.Verdict:
        verdict = judge(report, policy_model, name, baseline_report, baseline_path, allowance)
        verdict.report = str(report_path)
        return verdict

    def publish(report: rm.Report, report_path: Path) -> None:
        """The renderings and the MLflow run, under the output lock: the report they name is the one left behind."""
        renderings = render_files(report, html=_path(html), markdown=_path(markdown), junit=_path(junit))
        if mlflow:
            from convert.mlflow_log import log_run

            report.gate.mlflow_run_id = log_run(report, report_path, renderings)

    hooks = RunHooks(
        reads=tuple(reads),
        writes=tuple(writes),
        baseline=(baseline_report, baseline_path) if baseline_report is not None else None,
        judge=verdict_of,
        publish=publish,
    )
    return run_pipeline(request, progress, hooks).report.gate


def _path(value: str | os.PathLike | None) -> Path | None:
    return Path(value) if value is not None else None


def _request(policy: Policy, out: Path, force: bool, command: str, benchmark: bool) -> ConvertRequest:
    return ConvertRequest(
        model=policy.model.path,
        **{**options.from_policy(policy), "out": out},
        given={name: Path(path) for name, path in policy.require.artifacts.items()},
        benchmark=benchmark,
        force=force,
        command=command,
    )
