"""The Python API: the same pipeline as the CLI, returning a result object instead of an exit code."""

from __future__ import annotations

import inspect
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from convert import options
from convert.artifacts import given_by_name
from convert.errors import ConvertError
from convert.options import API_DEFAULTS
from convert.pipeline import ConversionResult, ConvertRequest, run
from convert.sources.base import SourceModel
from convert.sources.request import SourceRequest
from convert.sources.resolve import resolve_source
from convert.specs import parse_input_specs


def convert(
    model: Any,
    *,
    to: Sequence[str] = API_DEFAULTS["to"],
    example_inputs: Any = API_DEFAULTS["example_inputs"],
    inputs: Sequence[str] = API_DEFAULTS["inputs"],
    out: str | Path | None = API_DEFAULTS["out"],
    framework: str | None = API_DEFAULTS["framework"],
    task: str | None = API_DEFAULTS["task"],
    component: Sequence[str] = API_DEFAULTS["component"],
    dtype: str = API_DEFAULTS["dtype"],
    weights: str | Path | None = API_DEFAULTS["weights"],
    weights_key: str | None = API_DEFAULTS["weights_key"],
    params: Any = API_DEFAULTS["params"],
    dims: Sequence[str] = API_DEFAULTS["dims"],
    optimize: Sequence[str] = API_DEFAULTS["optimize"],
    package: Sequence[str] = API_DEFAULTS["package"],
    data: str | Path | None = API_DEFAULTS["data"],
    data_samples: int = API_DEFAULTS["data_samples"],
    columns: Sequence[str] = API_DEFAULTS["columns"],
    preprocess: str | None = API_DEFAULTS["preprocess"],
    metric: str | None = API_DEFAULTS["metric"],
    calibration_data: str | Path | None = API_DEFAULTS["calibration_data"],
    calibration_method: str = API_DEFAULTS["calibration_method"],
    keep_fp32: Sequence[str] = API_DEFAULTS["keep_fp32"],
    weight_group_size: int = API_DEFAULTS["weight_group_size"],
    weight_ratio: float = API_DEFAULTS["weight_ratio"],
    accuracy: Sequence[str] = API_DEFAULTS["accuracy"],
    shape_ranges: Sequence[str] = API_DEFAULTS["shape_ranges"],
    benchmark: bool = API_DEFAULTS["benchmark"],
    threads: int | None = API_DEFAULTS["threads"],
    benchmark_batch: int = API_DEFAULTS["benchmark_batch"],
    benchmark_seconds: float = API_DEFAULTS["benchmark_seconds"],
    opset: int | None = API_DEFAULTS["opset"],
    tolerance: Sequence[str] = API_DEFAULTS["tolerance"],
    samples: int = API_DEFAULTS["samples"],
    seed: int = API_DEFAULTS["seed"],
    allow_fixed_shapes: bool = API_DEFAULTS["allow_fixed_shapes"],
    min_precision_share: float = API_DEFAULTS["min_precision_share"],
    unbuilt: str = API_DEFAULTS["unbuilt"],
    trust_code: bool = API_DEFAULTS["trust_code"],
    force: bool = API_DEFAULTS["force"],
    stage_timeout: float | None = API_DEFAULTS["stage_timeout"],
    isolate: bool = API_DEFAULTS["isolate"],
    cache: bool = API_DEFAULTS["cache"],
    cache_dir: str | Path | None = API_DEFAULTS["cache_dir"],
) -> ConversionResult:
    """Export ``model`` to every format in ``to`` (default: onnx) and validate each artifact against it.

    ``model`` is a framework object (e.g. a ``torch.nn.Module``), a model file path, a Hugging Face model folder (what
    ``save_pretrained`` writes; ``task`` picks the head, e.g. ``"text-generation-with-past"``; an encoder-decoder, CLIP
    or SigLIP folder, or a diffusion pipeline's, is converted as its components, ``component`` naming some only), or a
    ``"package.module:callable"`` or ``"path/to/file.py:callable"`` factory; a JAX model is a function ``f(params, *inputs)`` with ``params``
    (a pytree, or a .msgpack / .npz / .safetensors path), a flax NNX or linen module, or an Equinox module.
    ``example_inputs`` is a tuple of tensors/arrays in call order, a dict of arrays by input name, or an
    ``.npz`` path; ``inputs`` are spec strings such as
    ``"x:float32[B,3,32,32]"`` whose symbols become dynamic axes. ``optimize`` names passes on the ONNX artifact
    (``"int8"``, ``"openvino:fp16"``..., or ``"auto"`` for the fastest within budget), judged by ``accuracy``
    budgets; ``data`` (with ``data_samples``, ``columns``, ``preprocess``) gives samples of your own that every artifact
    is validated on, and with labels the task metrics (``metric``: a ``module:function`` of your own, with
    ``trust_code``) whose drop ``accuracy`` may budget ("task_top1_drop<=0.5%"); ``calibration_data`` and
    ``calibration_method`` calibrate the static INT8 passes; ``keep_fp32`` names node or module-path patterns those passes leave in FP32; ``weight_group_size`` and
    ``weight_ratio`` shape the weight-only passes (``"int4"``, ``"int8-weights"``, ``"openvino:int4"``,
    ``"openvino:int8-weights"``); an artifact that fixes a
    dim asked dynamic fails unless ``allow_fixed_shapes``; a reduced-precision artifact that computes less than
    ``min_precision_share`` of its multiply-accumulates in its precision (stores, weight-only) fails; a format or pass asked for that cannot be built here (TensorRT
    without a GPU) fails the run unless ``unbuilt="warn"`` (``report.unbuilt`` lists each); ``benchmark`` measures the source and every artifact that
    passed. Without ``out`` the artifacts go to a
    new temporary folder. A model given by path or ``module:callable`` is loaded, exported, validated and benchmarked in
    a worker process (``isolate``): a crash there fails that stage only, and a stage running past ``stage_timeout``
    seconds (None: no limit) is stopped and failed; a model given as a Python object stays in this process. With ``cache``,
    the stages of a model file (.pt2, TorchScript, SavedModel, .keras) whose content, options and libraries are unchanged
    reuse their cached results from ``cache_dir`` (default: $CONVERT_CACHE_DIR, else ~/.cache/convert); ``report.cache``
    says what was reused. Raises ``convert.ConvertError`` for bad input; a failed validation is not an
    exception: check ``result.passed``.
    """
    values = dict(locals())
    out = Path(out) if out is not None else Path(tempfile.mkdtemp(prefix="convert-"))
    request = ConvertRequest(model=model, **{**options.from_api(values), "out": out})
    return run(request)


def validate(artifacts: str | Path | Sequence[str | Path], *, against: Any, **keywords: Any) -> ConversionResult:
    """Validate artifacts you already have (an ONNX file, a .pt2, .pte or .tflite, a TorchScript archive, a SavedModel
    or OpenVINO folder) against the source model ``against``, as they are: never moved or changed. ``keywords`` are
    those of ``convert`` that do not make artifacts (``inputs``, ``example_inputs``, ``dims``, ``tolerance``,
    ``accuracy``, ``data``, ``benchmark``, ``out``...); the result's report names each artifact by its file name."""
    paths = [artifacts] if isinstance(artifacts, (str, Path)) else list(artifacts)
    making = sorted(set(keywords) & {options.BY_NAME[name].keyword for name in options.MAKES_ARTIFACTS})
    if making:
        raise ConvertError(f"validate() makes no artifact, and {making[0]}= asks for one", f"Drop {making[0]}=, or call convert().")
    unknown = sorted(set(keywords) - (set(inspect.signature(convert).parameters) - {"model"}))
    if unknown:
        raise TypeError(f"validate() got an unexpected keyword argument {unknown[0]!r} (the source model is against=)")
    out = keywords.pop("out", API_DEFAULTS["out"])
    request = ConvertRequest(
        model=against,
        **{**options.from_api(keywords), "to": (), "out": Path(out) if out is not None else Path(tempfile.mkdtemp(prefix="convert-"))},
        given=given_by_name(paths),
    )
    return run(request)


def load(
    model: Any,
    *,
    inputs: Sequence[str] = API_DEFAULTS["inputs"],
    example_inputs: Any = API_DEFAULTS["example_inputs"],
    framework: str | None = API_DEFAULTS["framework"],
    task: str | None = API_DEFAULTS["task"],
    component: str | Sequence[str] = API_DEFAULTS["component"],
    dtype: str = API_DEFAULTS["dtype"],
    weights: str | Path | None = API_DEFAULTS["weights"],
    weights_key: str | None = API_DEFAULTS["weights_key"],
    params: Any = API_DEFAULTS["params"],
    trust_code: bool = API_DEFAULTS["trust_code"],
) -> SourceModel:
    """Load a model the way the pipeline does and return its SourceModel (reference inference and specs); ``component``
    names one network of a model made of several (an encoder-decoder's ``decoder_with_past``, say)."""
    names = (component,) if isinstance(component, str) else tuple(component)
    if len(names) > 1:
        raise ConvertError(f"load() loads one component, and component= names {len(names)}", "Name one, e.g. component='encoder'.")
    return resolve_source(
        SourceRequest(
            model=model,
            framework=framework,
            task=task,
            component=names[0] if names else None,
            dtype=dtype,
            weights=Path(weights) if weights else None,
            weights_key=weights_key,
            params=_params(params),
            inputs=parse_input_specs(tuple(inputs)),
            example_inputs=example_inputs,
            trust_code=trust_code,
        )
    )


def _params(params: Any) -> Any:
    """A params path as a Path; a pytree as it is."""
    return Path(params) if isinstance(params, str) else params
