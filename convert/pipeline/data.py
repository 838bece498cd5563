"""The user's own samples in a run: the --data validation case (with the source's outputs and task metrics) and the
--calibration-data feeds, each recorded in the report with its digest, its size and the samples used.

A decoder's samples are its text: input_ids and its attention_mask; its cache starts empty, the outputs at positions
the mask hides are not compared, and its labels are the next token at each position (transformers' causal-LM labels
where the data has them, else the text itself), so that perplexity and next-token accuracy are its task metrics."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from convert.datasets import Sample, chosen_indices, open_dataset, parse_columns, parse_preprocess
from convert.errors import ConvertError
from convert.memory import GIB, available_bytes
from convert.pipeline.context import RunContext
from convert.pipeline.reference import source_outputs
from convert.reports import model as rm
from convert.safety import sha256_files
from convert.validation import ValidationCase
from convert.validators import ShapeCase
from convert.validators.generation import CacheLayout, hide_padding, next_token_labels, text_feed, text_inputs
from convert.worker import TaskScores

DATA_CASE = "data"  # the label of the --data case's checks


def read_samples(ctx: RunContext, path: Path, role: str) -> tuple[list[Sample], rm.DataRecord]:
    """The chosen samples of the dataset at ``path`` (never the whole dataset), and its record in the report."""
    request = ctx.request
    specs, layout = ctx.source.signature.inputs, decoder_layout(ctx)
    if layout is not None:
        specs = tuple(spec for spec in specs if spec.name not in text_inputs(layout))
    dataset = open_dataset(path, specs, parse_columns(request.columns), parse_preprocess(request.preprocess))
    if dataset.size == 0:
        raise ConvertError(f"the data {path} holds no samples", "Point the option at a dataset with at least one sample.")
    indices = chosen_indices(dataset.size, request.data_samples, request.seed)
    samples: list[Sample] = []
    held = 0
    for sample in dataset.read(indices):
        if layout is not None:
            sample.feed = text_feed(layout, sample.feed)
        samples.append(sample)
        held += sum(a.nbytes for a in sample.feed.values())
        if len(samples) == 1 and held * len(indices) * 3 > available_bytes():  # inputs, references and the worker's copy
            raise ConvertError(
                f"{len(indices)} samples of {path} take about {held * len(indices) / GIB:.1f} GiB, more than this machine can "
                "hold with their outputs",
                f"Use fewer samples with --data-samples (now {len(indices)}).",
            )
    record = rm.DataRecord(
        role=role,
        path=str(path),
        kind=dataset.kind,
        sha256=sha256_files([path]),
        size=dataset.size,
        used=indices,
        labelled=dataset.labelled,
        detail=dataset.detail,
    )
    ctx.report.data.append(record)
    return samples, record


def data_case(ctx: RunContext, stage: rm.Stage) -> ValidationCase | None:
    """The --data case: the chosen samples, the source's outputs for them and, with labels, its task metrics."""
    request, policy = ctx.request, ctx.policy
    if request.data is None:  # a task metric without data was refused in the plan
        return None
    samples, record = read_samples(ctx, Path(request.data), "validation")
    feeds = [sample.feed for sample in samples]
    references, error, _ = source_outputs(
        ctx, stage, f"data {record.sha256[:12]}", feeds, "the source model ran on the --data samples", "Check the data's shapes."
    )
    if error:
        failed = samples[len(references)]
        shapes = ", ".join(f"{n}{list(a.shape)}" for n, a in failed.feed.items())
        raise ConvertError(
            f"the source model fails on sample {failed.index} of {request.data} ({shapes}): {error}",
            "Check that the data is what the model takes (its columns, dtypes and shapes).",
        )
    case = ValidationCase(ShapeCase(DATA_CASE, {}), feeds=feeds, references=references, metric=request.metric)
    if decoder_layout(ctx) is not None:
        if all("attention_mask" in feed for feed in feeds):
            case.padding = [feed["attention_mask"] for feed in feeds]
            case.references = [hide_padding(outputs, mask) for outputs, mask in zip(references, case.padding)]
        case.labels = [_next_tokens(sample, request.data) for sample in samples]
        record.detail = "; ".join(filter(None, [record.detail, "labels: each position's next token"]))
    elif record.labelled:
        case.labels = [sample.label for sample in samples]
    if case.labels is not None:
        case.task = _source_task(ctx, case)
        record.task_output = ctx.policy.task_output = case.task.output
        record.source_task = {m.name: m.source for m in case.task.metrics}
    elif policy.task_budget or request.metric:
        raise ConvertError(
            f"a task metric is asked for, and the data {request.data} has no labels",
            "Store the labels as an array or column named label (or name it with --columns label=NAME).",
        )
    return case


def decoder_layout(ctx: RunContext) -> CacheLayout | None:
    """The cache layout of a decoder whose --data is text (not an encoder-decoder's decoder), or None."""
    layout = ctx.source.generation
    return layout if layout is not None and not layout.infix else None


def _next_tokens(sample: Sample, data: str) -> np.ndarray:
    try:
        return next_token_labels(sample.feed, sample.label)
    except ValueError as exc:
        raise ConvertError(
            f"sample {sample.index} of {data} has {exc}",
            "A decoder's labels are its text as transformers' causal-LM loss takes them: input_ids' shape, -100 where "
            "not scored (or leave them out: the text's own tokens are scored).",
        ) from None


def _source_task(ctx: RunContext, case: ValidationCase) -> rm.TaskResult:
    """The source's task metrics on the labelled samples (in the worker: a --metric is the user's code)."""
    output, scores = ctx.worker.call(TaskScores(case.references, case.labels, case.metric))
    if not scores:
        raise ConvertError(f"no task metric applies to output {output} and the labels", "Give labels of one class id per row or per token.")
    unknown = [name for name in ctx.policy.task_budget if name.removeprefix("task_").removesuffix("_drop") not in scores]
    if unknown:
        raise ConvertError(
            f"the budget {unknown[0]} names a metric these labels do not give (they give {', '.join(scores)})",
            "Budget one of those: task_NAME_drop<=0.5%.",
        )
    metrics = [rm.TaskMetric(name=name, source=value, artifact=value, drop=0.0) for name, value in scores.items()]
    return rm.TaskResult(output=output, samples=len(case.labels), metrics=metrics)


def calibration_samples(ctx: RunContext) -> list[dict]:
    """The --calibration-data feeds, chosen as --data's are."""
    samples, _ = read_samples(ctx, Path(ctx.request.calibration_data), "calibration")
    return [sample.feed for sample in samples]
