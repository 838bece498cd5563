"""The reference stage: inputs for every shape case and the source model's own outputs for them, computed once;
the calibration feeds and the profile ranges that later stages take from them."""

from __future__ import annotations

import functools

import numpy as np

from convert.cache import Lookup
from convert.checks.base import crashed
from convert.errors import ConvertError
from convert.memory import GIB, check_fits, feed_bytes
from convert.pipeline.context import RunContext
from convert.reports import model as rm
from convert.validation import ValidationCase
from convert.validators import ShapeCase, generate_feed, plan_shape_cases
from convert.worker import ChildWorker, GreedyDecoding, ReferenceOutputs, SelectOutputs, StageCrashed

CALIBRATION_SAMPLES = 16


def reference(ctx: RunContext, stage: rm.Stage, dim_sizes: dict[str, tuple[int, ...]]) -> list[ValidationCase]:
    """Inputs for every shape case and the source's own outputs for them, computed once."""
    source, request, worker = ctx.source, ctx.request, ctx.worker
    signature = source.signature
    unknown = [s for s in dim_sizes if s not in signature.symbols]
    if unknown:
        raise ConvertError(
            f"--dim or --shape-range names the symbol {unknown[0]}, which no input uses",
            f"The inputs' symbols are: {', '.join(signature.symbols) or 'none'}.",
        )
    past = source.generation.past_sizes() if source.generation is not None else None  # a decoder's cache past its window
    shapes = plan_shape_cases(signature.symbols, dim_sizes, source.export_sizes or None, source.dim_ranges or None, past)
    sample_bytes = [feed_bytes(signature.inputs, shape.sizes) for shape in shapes]
    largest = max(range(len(shapes)), key=sample_bytes.__getitem__)
    fits = functools.partial(
        check_fits,
        request.samples * sum(sample_bytes),
        copies=2 if isinstance(worker, ChildWorker) else 1,
        largest=f"{', '.join(f'{s.name}:{s.dtype}{list(s.shape(shapes[largest].sizes))}' for s in signature.inputs)} at "
        f"{sample_bytes[largest] / GIB:.2f} GiB a sample",
        samples=request.samples,
        cases=len(shapes),
    )
    fits(None)  # before any input is generated
    cases = []
    for index, shape in enumerate(shapes):
        case = ValidationCase(shape)
        feeds = [
            source.example_feed
            if index == 0 and sample == 0 and source.example_feed is not None
            else generate_feed(signature.inputs, shape.sizes, sample, request.seed)
            for sample in range(request.samples)
        ]
        case.references, error, case.reused = source_outputs(
            ctx,
            stage,
            shape.describe(),
            feeds,
            f"the source model ran on inputs of shape {shape.describe()}",
            "Run the model on such inputs in a Python shell to see the crash; check the --input specs.",
        )
        case.feeds = feeds[: len(case.references)]
        if error and index == 0:
            raise ConvertError(
                f"the source model fails on inputs generated from its specs ({', '.join(map(str, signature.inputs))}): {error}",
                "Check the --input shapes, dtypes and value domains (e.g. {0..VOCAB-1} for token ids).",
            )
        case.source_error = error
        cases.append(case)
        if index == 0:  # outputs at the other shapes estimated in proportion to their inputs
            per_input_byte = sum(v.nbytes for outputs in case.references for v in outputs.values()) / max(
                1, len(case.references) * sample_bytes[0]
            )
            fits(round(per_input_byte * request.samples * sum(sample_bytes)))
    stage.reused = all(case.reused for case in cases)
    outputs = tuple(cases[0].references[0])
    if not outputs:
        raise ConvertError("the model returns no tensors", "Return at least one tensor from the model.")
    worker.call(SelectOutputs(outputs), setup=True)
    source.with_outputs(outputs)
    unknown_outputs = ctx.policy.unknown_outputs(outputs)
    if unknown_outputs:
        raise ConvertError(
            f"--tolerance names the output '{unknown_outputs[0]}', which the model does not have",
            f"The model's outputs are: {', '.join(outputs)}.",
        )
    from convert.pipeline.data import data_case

    data = data_case(ctx, stage)
    if data is not None:
        cases.append(data)
    if source.generation is not None:
        cases.append(_generation_case(ctx, stage))
    return cases


def source_outputs(
    ctx: RunContext, stage: rm.Stage, key: str, feeds: list[dict[str, np.ndarray]], where: str, hint: str
) -> tuple[list[dict[str, np.ndarray]], str, bool]:
    """The source's outputs for each feed up to the first that fails, that failure ("" when none did), and whether
    they came from the cache; computed in the worker and cached under ``key`` otherwise (a crash there is the user's:
    ``where`` it ran and the ``hint`` say so)."""
    judge = functools.partial(_untrusted_references, samples=len(feeds))
    lookup = ctx.cache.find("reference", f"reference {key}", ctx.cache.source_packages, feeds, judge=judge)
    if lookup.hit is not None:
        return _cached_references(lookup), lookup.hit.data["error"], True
    try:
        references, error = ctx.worker.call(ReferenceOutputs(feeds))
    except StageCrashed as exc:
        raise ConvertError(f"{crashed(stage, exc)} ({where})", hint) from None
    ctx.cache.keep(
        lookup,
        {"error": error, "outputs": [list(outputs) for outputs in references]},
        arrays={f"{sample}/{name}": value for sample, outputs in enumerate(references) for name, value in outputs.items()},
    )
    return references, error, False


def _generation_case(ctx: RunContext, stage: rm.Stage) -> ValidationCase:
    """The source's greedy decoding from seeded prompts: every artifact of a decoder with a cache is checked over it."""
    from convert.validators.generation import GENERATION_STEPS

    try:
        generation = ctx.worker.call(GreedyDecoding(ctx.request.seed, GENERATION_STEPS))
    except StageCrashed as exc:
        raise ConvertError(
            f"{crashed(stage, exc)} (the source model decoding greedily)", "Run the model's generate() to see the crash."
        ) from None
    except Exception as exc:
        raise ConvertError(
            f"the source model cannot decode greedily with its cache fed back: {type(exc).__name__}: {exc}",
            "Check that the model generates with model.generate(); or export it with --task text-generation (no cache).",
        ) from exc
    batch, length = generation.prompts.shape
    label = f"generation of {GENERATION_STEPS} tokens from {batch} prompts"
    window = generation.layout.window
    if window:  # which cache lengths it crossed the window at
        label += f" of {length} tokens (past {length}..{length + GENERATION_STEPS - 2}, attention window {window})"
    return ValidationCase(ShapeCase(label, {}), generation=generation)


def _untrusted_references(hit, samples: int) -> str:
    """Why a reference entry is not taken as it is ("" when it is): one that records the source failing skips every
    check at its shape, which this run cannot tell again without running the source, so it is never reused (nor
    written); one that holds fewer samples than were asked for would validate on fewer."""
    data = hit.data
    if data["error"]:
        return (
            f"it records the source model failing on these inputs ({data['error']}), which skips the checks there: "
            "that is never taken from the cache"
        )
    outputs = data["outputs"]
    if len(outputs) != samples or not all(isinstance(names, list) and names == outputs[0] and names for names in outputs):
        return f"it holds the outputs of {len(outputs)} samples where {samples} were asked for, or not the same outputs for each"
    stored = hit.array_names()
    wanted = {f"{sample}/{name}" for sample, names in enumerate(outputs) for name in names}
    if hit.folder is not None and stored != wanted:
        return "its arrays are not the outputs it names"
    return ""


def _cached_references(lookup: Lookup) -> list[dict[str, np.ndarray]]:
    arrays = lookup.hit.arrays()
    return [{name: arrays[f"{sample}/{name}"] for name in names} for sample, names in enumerate(lookup.hit.data["outputs"])]


class CalibrationFeeds(list):
    """Calibration feeds, with where they came from (the report says so)."""

    origin = ""


def calibration_feeds(ctx: RunContext) -> CalibrationFeeds:
    """Feeds for calibrated quantization: the user's --calibration-data, or generated from the specs at the export shape."""
    from convert.pipeline.data import calibration_samples

    request, source = ctx.request, ctx.source
    feeds = CalibrationFeeds()
    if request.calibration_data is not None:
        feeds.extend(calibration_samples(ctx))
        feeds.origin = f"{request.calibration_data} ({len(feeds)} feeds)"
        return feeds
    sizes = ctx.cases[0].shape.sizes
    feeds.extend(generate_feed(source.signature.inputs, sizes, sample, request.seed + 1000) for sample in range(CALIBRATION_SAMPLES))
    feeds.origin = (
        f"generated from the input specs ({CALIBRATION_SAMPLES} feeds at the export shape, seed {request.seed + 1000}): "
        "pass --calibration-data with real inputs for a representative calibration"
    )
    return feeds


def profile_ranges(ctx: RunContext, given: dict[str, tuple[int, int, int]]) -> dict[str, tuple[int, int, int]]:
    """(min, opt, max) per symbolic dim, for passes that fix them in advance (TensorRT profiles): --shape-range,
    else the smallest and largest validated sizes with the export size as opt."""
    ranges = {}
    for symbol in ctx.source.signature.symbols:
        sizes = [case.shape.sizes[symbol] for case in ctx.cases if symbol in case.shape.sizes]
        ranges[symbol] = given.get(symbol) or (min(sizes), ctx.cases[0].shape.sizes[symbol], max(sizes))
    return ranges
