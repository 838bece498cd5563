"""A Triton Inference Server model repository: one model folder per validated artifact, ``NAME/config.pbtxt`` beside
``NAME/1/`` holding the artifact under the file name its platform loads by default. The configuration is taken from what
validation ran, never from what the artifact declares: each input and output with its Triton data type, a dim -1 exactly
where validation moved it, batching only over a batch dim that validation moved.

Its checks read the repository back as Triton would: each config.pbtxt parses with Triton's own ModelConfig schema
(convert/packagers/triton_model_config_pb2.py, vendored from tritonclient), then is held to the artifact's validated
checks (its inputs and outputs, their types, ranks and dims, its batching), its files are where the platform looks for
them, a TensorRT engine's profile covers the sizes validated, and each artifact's bytes in it have the validated digest."""

from __future__ import annotations

import ast
import json
import pickletools
import re
import shutil
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from convert.errors import ConvertError
from convert.packagers.base import PackageJob, Packager, PackedArtifact
from convert.reports import model as rm
from convert.safety import combine_digests, named_files, sha256_file

CONFIG = "config.pbtxt"
VERSION = "1"  # the one version folder of each model: Triton serves the highest it finds
TENSORFLOW_DEPRECATION = "Triton deprecated its TensorFlow backend (tensorflow_savedmodel) in release 25.03"


@dataclass(frozen=True)
class Platform:
    key: str  # the config field that names it: "platform", or "backend" where Triton has no platform name for it
    value: str
    model_file: str  # the file (a folder for a SavedModel) Triton loads from the version folder when none is named


PLATFORMS = {
    "onnx": Platform("platform", "onnxruntime_onnx", "model.onnx"),
    "openvino": Platform("backend", "openvino", "model.xml"),
    "torchscript": Platform("platform", "pytorch_libtorch", "model.pt"),
    "tensorrt": Platform("platform", "tensorrt_plan", "model.plan"),
    "savedmodel": Platform("platform", "tensorflow_savedmodel", "model.savedmodel"),
}
# the files beside the model file its platform reads by their own name
COMPANIONS = {"openvino": ("model.bin",), "savedmodel": ("model.savedmodel/saved_model.pb",)}
TRITON_TYPES = {
    "bool": "TYPE_BOOL",
    "uint8": "TYPE_UINT8",
    "uint16": "TYPE_UINT16",
    "uint32": "TYPE_UINT32",
    "uint64": "TYPE_UINT64",
    "int8": "TYPE_INT8",
    "int16": "TYPE_INT16",
    "int32": "TYPE_INT32",
    "int64": "TYPE_INT64",
    "float16": "TYPE_FP16",
    "float32": "TYPE_FP32",
    "float64": "TYPE_FP64",
    "bfloat16": "TYPE_BF16",
}


@dataclass
class Tensor:
    """An input or output as validation ran it: the sizes each axis took over the artifact's passed checks."""

    name: str  # as the model's platform names it (LibTorch's <name>__<index> for TorchScript)
    source_name: str  # as the report names it
    dtype: str | None  # NumPy's name; None where the report does not give it
    sizes: list[set[int]]  # the full shape's axes, the batch axis included

    def dims(self, batched: bool) -> list[int]:
        """Triton's dims: each axis's one size, or -1 where validation moved it (the batch axis left out when batched)."""
        return [-1 if len(sizes) > 1 else next(iter(sizes)) for sizes in self.sizes[1 if batched else 0 :]]


@dataclass
class Batch:
    symbol: str
    max_size: int
    limit: str  # what sets max_size: the artifact's bound, or the largest size validated

    @property
    def why(self) -> str:
        return f"max_batch_size {self.max_size}: {self.limit}"


@dataclass
class ModelPlan:
    """One artifact's model as its validation describes it: what its config.pbtxt must say."""

    name: str
    artifact: PackedArtifact
    record: rm.ArtifactRecord
    inputs: list[Tensor] = field(default_factory=list)
    outputs: list[Tensor] = field(default_factory=list)
    batch: Batch | None = None
    unbatched: str = ""  # why max_batch_size is 0
    gpu: bool = False
    gpus: list[str] = field(default_factory=list)  # the GPUs of the run that built and validated it
    problems: list[str] = field(default_factory=list)  # why Triton cannot serve it as validated
    renamed: str = ""  # LibTorch's names for the source's, said in the io check

    @property
    def platform(self) -> Platform:
        return PLATFORMS[self.artifact.format]

    @property
    def checks(self) -> list[rm.Check]:
        return _validated(self.record)


class TritonRepository(Packager):
    def build(self, job: PackageJob) -> Path:
        path = self.package_path(job.folder, job.stem)
        path.mkdir()
        for name, artifact in _model_names(job.artifacts).items():
            version = path / name / VERSION
            for _, file, placed in _layout(artifact):
                (version / placed).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(file, version / placed)  # a copy: onnx refuses external data a hard link could change
            plan = _plan(job, artifact, name, artifact.path)
            (path / name / CONFIG).write_text(_config_text(plan, job.report.tool_version))
        return path

    def check(self, path: Path, job: PackageJob) -> list[rm.PackageCheck]:
        checks = []
        for name, artifact in _model_names(job.artifacts).items():
            folder = path / name
            model_file = folder / VERSION / PLATFORMS[artifact.format].model_file
            plan = _plan(job, artifact, name, model_file)
            config, failure = _parsed(folder / CONFIG)
            checks.append(
                rm.PackageCheck(name=f"config:{name}", status="failed", reason=failure) if failure else _config_check(plan, config)
            )
            if config is not None:
                checks += [_io_check(plan, config), _batch_check(plan, config), _dims_check(plan, config)]
                if artifact.format == "tensorrt":
                    checks.append(_profiles_check(plan, config))
            checks.append(_files_check(plan, folder))
            checks.append(_digest_check(artifact, folder / VERSION))
        return checks


def _model_names(artifacts: tuple[PackedArtifact, ...]) -> dict[str, PackedArtifact]:
    """Each artifact's model name: its key in the characters Triton's repository and URLs take (``openvino:int8`` is
    ``openvino_int8``), made unique in order."""
    names: dict[str, PackedArtifact] = {}
    for artifact in artifacts:
        base = re.sub(r"[^A-Za-z0-9_-]+", "_", artifact.key).strip("_") or "model"
        name, count = base, 1
        while name in names:
            count += 1
            name = f"{base}_{count}"
        names[name] = artifact
    return names


def _layout(artifact: PackedArtifact) -> list[tuple[str, Path, str]]:
    """(the name the validated digest gives a file, the file, its path in the version folder), for every file of the
    artifact. The model file takes its platform's default name; an ONNX model's external data keeps its own (the graph
    names it); a folder's files keep their paths in it, under the model file's name for a SavedModel."""
    model_file = PLATFORMS[artifact.format].model_file
    placed = []
    for name, file in named_files(list(artifact.files)):
        if artifact.path.is_dir():
            inside = file.relative_to(artifact.path).as_posix()
            placed.append((name, file, f"{model_file}/{inside}" if artifact.format == "savedmodel" else inside))
        else:
            placed.append((name, file, model_file if file == artifact.path else file.relative_to(artifact.path.parent).as_posix()))
    return placed


def _validated(record: rm.ArtifactRecord) -> list[rm.Check]:
    """The checks a configuration is taken from: those that passed at a shape case (a decoder's generation check feeds
    its own cache, at shapes it does not record)."""
    return [c for c in record.checks if c.status == "passed" and c.kind == "shape" and c.input_shapes]


def _plan(job: PackageJob, artifact: PackedArtifact, name: str, model_file: Path) -> ModelPlan:
    """What the model's configuration must say, from the report; a TorchScript's forward() is read from ``model_file``."""
    from convert.specs import parse_input_spec

    record = next(r for r in job.report.artifacts if r.key == artifact.key)
    plan = ModelPlan(name=name, artifact=artifact, record=record, gpus=list(job.report.environment.device_names))
    checks = plan.checks
    if not checks:
        plan.problems.append("no check of it passed at a shape case, so no input or output shape was validated")
        return plan
    specs = {spec.name: spec for spec in map(parse_input_spec, job.report.source.inputs)}
    fed = checks[0].input_shapes
    input_names = [n for n in specs if n in fed] + [n for n in fed if n not in specs]
    produced = [o.name for o in checks[0].outputs]
    output_names = [n for n in job.report.source.outputs if n in produced] + [n for n in produced if n not in job.report.source.outputs]
    plan.inputs = [Tensor(n, n, specs[n].dtype if n in specs else None, []) for n in input_names]
    plan.outputs = [Tensor(n, n, None, []) for n in output_names]
    for tensor in plan.inputs:
        plan.problems += _sizes(tensor, [c.input_shapes.get(tensor.source_name) for c in checks])
    for tensor in plan.outputs:
        metrics = [next((o for o in c.outputs if o.name == tensor.source_name), None) for c in checks]
        plan.problems += _sizes(tensor, [m.shape if m else None for m in metrics])
        dtypes = {m.dtype for m in metrics if m is not None}
        tensor.dtype = dtypes.pop() if len(dtypes) == 1 else None
    for tensor in (*plan.inputs, *plan.outputs):
        if tensor.dtype not in TRITON_TYPES:
            plan.problems.append(
                f"'{tensor.source_name}' is {tensor.dtype or 'of no single dtype'} in the report: Triton has no type for it"
            )
    _name_for_platform(plan, input_names, model_file)
    widened = _bfloat16_outputs(model_file) if artifact.format == "onnx" else set()
    for tensor in plan.outputs:
        if tensor.dtype == "float32" and tensor.name in widened:
            tensor.dtype = "bfloat16"
    plan.batch, plan.unbatched = _batch(plan, specs)
    plan.gpu = artifact.format == "tensorrt" or all(c.device != "cpu" for c in checks)
    return plan


def _bfloat16_outputs(model_file: Path) -> set[str]:
    """The outputs an ONNX graph declares bfloat16: the runners hand them over widened to float32 (NumPy has no bfloat16),
    so the report records float32 for them. None where the file cannot be read (the files check says why)."""
    import onnx
    from google.protobuf.message import DecodeError

    try:
        graph = onnx.load(str(model_file), load_external_data=False).graph
    except (OSError, DecodeError):
        return set()
    return {o.name for o in graph.output if o.type.tensor_type.elem_type == onnx.TensorProto.BFLOAT16}


def _sizes(tensor: Tensor, shapes: list[list[int] | None]) -> list[str]:
    """Fill in the sizes each axis of the tensor took; what the report leaves out or contradicts, as problems."""
    if any(shape is None for shape in shapes):
        return [f"'{tensor.source_name}' is missing from some of its passed checks"]
    if len({len(shape) for shape in shapes}) != 1:
        return [f"'{tensor.source_name}' has ranks {sorted({len(s) for s in shapes})} in its passed checks"]
    tensor.sizes = [set(axis) for axis in zip(*shapes)] if shapes[0] else []
    return []


def _name_for_platform(plan: ModelPlan, input_names: list[str], model_file: Path) -> None:
    """The names the platform matches the configuration by. ONNX Runtime, OpenVINO and TensorRT name outputs as the ONNX
    graph does (one named like an input is set apart: convert/backends/onnx.py outputs_apart). LibTorch matches by
    position: ``<name>__<index>``, the index the position in forward()'s parameters or in the tuple it returns."""
    from convert.backends.onnx import outputs_apart

    if plan.artifact.format in ("onnx", "openvino", "tensorrt"):
        apart = outputs_apart(tuple(t.source_name for t in plan.outputs), tuple(input_names))
        for tensor in plan.outputs:
            tensor.name = apart.get(tensor.source_name, tensor.source_name)
    if plan.artifact.format != "torchscript":
        return
    try:
        parameters, returns, returned_names = torchscript_forward(model_file)
    except ConvertError as exc:
        plan.problems.append(exc.paragraph())
        return
    if returned_names is not None:  # the archive says which output each position holds: LibTorch's index is that position
        validated = {t.source_name: t for t in plan.outputs}
        if sorted(returned_names) != sorted(validated):
            plan.problems.append(
                f"its forward() returns ({', '.join(returned_names)}) and was validated with ({', '.join(validated)}): "
                "each output must be one that was validated"
            )
        plan.outputs = [validated[n] for n in returned_names if n in validated]
    # as convert/runtimes/torch.py calls it: by keyword where the inputs are the forward's parameters out of order
    by_keyword = set(input_names) <= set(parameters) and input_names != parameters[: len(input_names)]
    positions = {n: parameters.index(n) if by_keyword else i for i, n in enumerate(input_names)}
    if sorted(positions.values()) != list(range(len(parameters))):
        plan.problems.append(
            f"its forward() takes ({', '.join(parameters)}) and was validated with ({', '.join(input_names)}): Triton's LibTorch "
            "backend passes the inputs by position, every parameter in order"
        )
    tuple_of = re.fullmatch(r"Tuple\[Tensor(?:, Tensor)*\]", returns)
    returned = 1 if returns == "Tensor" else returns.count("Tensor") if tuple_of else None
    named = len(returned_names) if returned_names is not None else len(plan.outputs)  # a names mismatch is said above
    if returned != named:
        plan.problems.append(
            f"its forward() returns {returns}, and Triton's LibTorch backend takes a Tensor or a flat tuple of Tensors from it: "
            f"the TorchScript must return its {named} outputs so, in the source's order"
        )
    for tensor in plan.inputs:
        tensor.name = libtorch_name(tensor.source_name, positions[tensor.source_name])
    for index, tensor in enumerate(plan.outputs):
        tensor.name = libtorch_name(tensor.source_name, index)
    plan.renamed = "; ".join(f"{t.source_name} → {t.name}" for t in (*plan.inputs, *plan.outputs))


def libtorch_name(name: str, index: int) -> str:
    """LibTorch's ``<name>__<index>``: Triton reads the index after the first ``__``, so the name keeps none of its own."""
    return f"{re.sub(r'_{2,}', '_', name).strip('_') or 'tensor'}__{index}"


def torchscript_forward(path: Path) -> tuple[list[str], str, list[str] | None]:
    """The parameter names (self left out) and the return annotation of a TorchScript archive's forward(), read from
    the code it stores (parsed, never run): data.pkl names the root module's class, code/ holds that class. Third, the
    names of the flat outputs it returns, in order, where the archive stores them (convert/backends/torch.py)."""
    from convert.backends.torch import SCRIPT_OUTPUT_NAMES

    try:
        with zipfile.ZipFile(path) as archive:
            pickled = next(n for n in archive.namelist() if n.count("/") == 1 and n.endswith("/data.pkl"))
            prefix = pickled.partition("/")[0]
            module, _, class_name = next(arg for op, arg, _ in pickletools.genops(archive.read(pickled)) if op.name == "GLOBAL").partition(
                " "
            )
            code = archive.read(f"{prefix}/code/{module.replace('.', '/')}.py").decode()
            names_member = f"{prefix}/extra/{SCRIPT_OUTPUT_NAMES}"
            output_names = json.loads(archive.read(names_member)) if names_member in archive.namelist() else None
            if output_names is not None and not (isinstance(output_names, list) and all(isinstance(n, str) for n in output_names)):
                raise ValueError(f"{SCRIPT_OUTPUT_NAMES} holds {output_names!r}, not a list of output names")
        forward = next(
            node
            for cls in ast.parse(code).body
            if isinstance(cls, ast.ClassDef) and cls.name == class_name
            for node in cls.body
            if isinstance(node, ast.FunctionDef) and node.name == "forward"
        )
    except (OSError, zipfile.BadZipFile, KeyError, StopIteration, SyntaxError, UnicodeDecodeError, ValueError) as exc:
        raise ConvertError(f"the forward() of {path.name} cannot be read from its code ({type(exc).__name__}: {exc})") from None
    returns = ast.unparse(forward.returns) if forward.returns is not None else "an unannotated value"
    return [arg.arg for arg in forward.args.args[1:]], returns, output_names


def _batch(plan: ModelPlan, specs: dict) -> tuple[Batch | None, str]:
    """The batch dim Triton may batch requests over: dim 0 of every input names one symbol, validation ran it at more
    than one size, and dim 0 of every input and output had that size in each check. Else None, and why."""
    first_dims = {specs[t.source_name].dims[0] if t.source_name in specs and specs[t.source_name].dims else None for t in plan.inputs}
    symbol = first_dims.pop() if len(first_dims) == 1 else None
    if not isinstance(symbol, str) or "+" in symbol:
        return None, "max_batch_size 0: dim 0 of the inputs is not one symbolic dim, so there is no batch to batch requests over"
    sizes = []
    for check in plan.checks:
        shapes = [*(check.input_shapes.get(t.source_name) for t in plan.inputs), *(o.shape for o in check.outputs)]
        if any(not shape or shape[0] != shapes[0][0] for shape in shapes):
            return None, f"max_batch_size 0: dim 0 of some input or output is not {symbol} in the check at {check.shape}"
        sizes.append(shapes[0][0])
    if len(set(sizes)) < 2:
        return None, f"max_batch_size 0: validation ran {symbol} at {sizes[0]} only, so it is no batch validation moved"
    low, high = plan.record.dim_bounds.get(symbol, [1, None])
    if low > 1:
        return None, f"max_batch_size 0: the artifact takes {symbol} from {low}, and Triton sends batches from 1"
    if high is not None:
        return Batch(symbol, high, f"the artifact takes {symbol} up to {high}"), ""
    return Batch(symbol, max(sizes), f"validation ran {symbol} up to {max(sizes)} (the artifact sets no bound on it)"), ""


def _config_text(plan: ModelPlan, tool_version: str) -> str:
    """The model's config.pbtxt, in Triton's own text format."""
    artifact, batched = plan.artifact, plan.batch is not None
    lines = [
        f"# written by model-convert {tool_version} from the validated artifact '{artifact.key}' ({artifact.format}, "
        f"{artifact.precision}, sha256 {artifact.sha256}): its inputs, outputs and dims are those its validation ran",
        f"name: {_quoted(plan.name)}",
        f"{plan.platform.key}: {_quoted(plan.platform.value)}",
        f"max_batch_size: {plan.batch.max_size if batched else 0}",
    ]
    for role, tensors in (("input", plan.inputs), ("output", plan.outputs)):
        if not tensors:
            continue
        lines.append(f"{role} [")
        for index, tensor in enumerate(tensors):
            dims = tensor.dims(batched)
            # Triton takes no empty dims: a tensor of no dims (but the batch) is [ 1 ] to clients, reshaped for the model
            shape = f"dims: [ {', '.join(map(str, dims))} ]" if dims else "dims: [ 1 ]\n    reshape: { shape: [ ] }"
            data_type = TRITON_TYPES.get(tensor.dtype or "", "TYPE_INVALID")
            lines += ["  {", f"    name: {_quoted(tensor.name)}", f"    data_type: {data_type}", f"    {shape}"]
            lines.append("  }," if index < len(tensors) - 1 else "  }")
        lines.append("]")
    if batched:
        lines.append("dynamic_batching { }")
    profile = ' profile: [ "0" ]' if artifact.format == "tensorrt" else ""
    lines.append(f"instance_group [ {{ kind: {'KIND_GPU' if plan.gpu else 'KIND_CPU'} count: 1{profile} }} ]")
    return "\n".join(lines) + "\n"


def _quoted(text: str) -> str:
    """A protobuf text-format string: quotes and backslashes escaped, control characters as octal escapes."""
    escaped = "".join(f"\\{c}" if c in '"\\' else f"\\{ord(c):03o}" if ord(c) < 0x20 else c for c in text)
    return f'"{escaped}"'


def _parsed(path: Path):
    """(the ModelConfig the file holds, "") or (None, why it does not parse)."""
    if not path.is_file():
        return None, f"{path.parent.name}/{CONFIG} is missing"
    try:
        from google.protobuf import text_format

        from convert.packagers.triton_model_config_pb2 import ModelConfig
    except Exception as exc:  # protobuf's VersionError, an ImportError: the schema cannot be loaded here
        return None, (
            f"Triton's ModelConfig schema (protobuf gencode 6.33.5) cannot be loaded here ({type(exc).__name__}: {exc}); "
            "install protobuf>=6.33.5"
        )
    try:
        return text_format.Parse(path.read_text(), ModelConfig()), ""
    except (text_format.ParseError, UnicodeDecodeError) as exc:
        return None, f"{path.parent.name}/{CONFIG} does not parse with Triton's ModelConfig schema: {exc}"


def _check(name: str, problems: list[str], passed: str) -> rm.PackageCheck:
    if problems:
        return rm.PackageCheck(name=name, status="failed", reason="; ".join(problems))
    return rm.PackageCheck(name=name, status="passed", reason=passed)


def _config_check(plan: ModelPlan, config) -> rm.PackageCheck:
    from convert.packagers.triton_model_config_pb2 import ModelInstanceGroup

    platform, problems = plan.platform, []
    if config.name != plan.name:
        problems.append(f"it names the model '{config.name}', and Triton requires its folder's name, '{plan.name}'")
    given = getattr(config, platform.key)
    if given != platform.value:
        problems.append(f"its {platform.key} is '{given}', and {plan.artifact.format} needs '{platform.value}'")
    kind = "KIND_GPU" if plan.gpu else "KIND_CPU"
    kinds = [ModelInstanceGroup.Kind.Name(group.kind) for group in config.instance_group]
    if kinds != [kind]:
        problems.append(f"its instance groups are of kinds {kinds}, and one of {kind} runs where it was validated")
    notes = [f"parses with Triton's ModelConfig schema; {platform.key} {platform.value}, instances {kind}"]
    if plan.artifact.format == "tensorrt":
        gpus = ", ".join(plan.gpus) or "a GPU the report does not name"
        notes.append(f"a TensorRT plan runs only on the GPU model and TensorRT version that built it ({gpus})")
    if plan.artifact.format == "savedmodel":
        notes.append(f"{TENSORFLOW_DEPRECATION}: a later server may not load it")
    return _check(f"config:{plan.name}", problems, "; ".join(notes))


def _model_view(tensor) -> list[int]:
    """The dims the model itself takes (a reshape's shape where the config gives one), the batch left out."""
    return list(tensor.reshape.shape) if tensor.HasField("reshape") else list(tensor.dims)


def _type_name(number: int) -> str:
    from convert.packagers.triton_model_config_pb2 import DataType

    try:
        return DataType.Name(number)
    except ValueError:  # a number the schema does not name: kept as it is by protobuf
        return str(number)


def _io_check(plan: ModelPlan, config) -> rm.PackageCheck:
    problems = list(plan.problems)
    batch = 1 if config.max_batch_size > 0 else 0
    for role, expected, given in (("input", plan.inputs, config.input), ("output", plan.outputs, config.output)):
        declared = {t.name: t for t in given}
        wanted = {t.name: t for t in expected}
        if set(declared) != set(wanted):
            problems.append(
                f"its {role}s are {sorted(declared)}, and the artifact's are {sorted(wanted)}"
                + (" (LibTorch's <name>__<index>)" if plan.artifact.format == "torchscript" else "")
            )
        for name in sorted(set(declared) & set(wanted)):
            tensor, want = declared[name], wanted[name]
            given_type = _type_name(tensor.data_type)
            if want.dtype in TRITON_TYPES and given_type != TRITON_TYPES[want.dtype]:
                problems.append(f"{role} '{name}' is {given_type}, and validation ran it as {want.dtype} ({TRITON_TYPES[want.dtype]})")
            rank = len(_model_view(tensor)) + batch
            if want.sizes and rank != len(want.sizes):
                problems.append(
                    f"{role} '{name}' has rank {rank} ({'max_batch_size > 0 adds the batch dim to ' if batch else ''}"
                    f"its {len(_model_view(tensor))} dims), and validation ran it at rank {len(want.sizes)}"
                )
    passed = f"{len(plan.inputs)} inputs and {len(plan.outputs)} outputs, named, typed and ranked as validated"
    return _check(f"io:{plan.name}", problems, f"{passed}; LibTorch's names: {plan.renamed}" if plan.renamed else passed)


def _batch_check(plan: ModelPlan, config) -> rm.PackageCheck:
    problems, size = [], config.max_batch_size
    if size > 0 and plan.batch is None:
        problems.append(f"max_batch_size is {size}, but {plan.unbatched.removeprefix('max_batch_size 0: ')}")
    elif size > 0 and size > plan.batch.max_size:
        problems.append(f"max_batch_size is {size}, and {plan.batch.limit}")
    if size == 0 and config.HasField("dynamic_batching"):
        problems.append("dynamic_batching is set with max_batch_size 0: Triton batches requests only over a batch dim")
    if size == 0 and plan.batch is not None:
        short = [t.name for t in (*config.input, *config.output) if len(_model_view(t)) == len(_expected(plan, t.name).sizes) - 1]
        if short:
            problems.append(
                f"max_batch_size is 0, so dims give every dim, and {short} leave one out: the batch dim "
                f"(set max_batch_size {plan.batch.max_size} to have Triton add it)"
            )
    passed = f"{plan.batch.why} (dynamic batching over it)" if size > 0 and plan.batch else plan.unbatched or "max_batch_size 0"
    return _check(f"batch:{plan.name}", problems, passed)


def _expected(plan: ModelPlan, name: str) -> Tensor:
    return next((t for t in (*plan.inputs, *plan.outputs) if t.name == name), Tensor(name, name, None, []))


def _dims_check(plan: ModelPlan, config) -> rm.PackageCheck:
    """Each dim -1 exactly where validation moved it, else the one size it ran at."""
    problems, batch = [], 1 if config.max_batch_size > 0 else 0
    for tensor in (*config.input, *config.output):
        want = _expected(plan, tensor.name)
        dims = _model_view(tensor)
        if len(dims) + batch != len(want.sizes):
            continue  # the io check says the rank is wrong
        for axis, (dim, sizes) in enumerate(zip(dims, want.sizes[batch:]), start=batch):
            ran = ", ".join(map(str, sorted(sizes)))
            if dim != -1 and len(sizes) > 1:
                problems.append(f"'{tensor.name}' is fixed at {dim} on axis {axis}, which validation ran at {ran}")
            elif dim == -1 and len(sizes) == 1:
                problems.append(f"'{tensor.name}' takes any size on axis {axis}, which validation ran at {ran} only")
            elif dim != -1 and dim not in sizes:
                problems.append(f"'{tensor.name}' is {dim} on axis {axis}, which validation ran at {ran}")
    passed = "-1 exactly where validation moved a dim, the validated size elsewhere"
    bounded = [f"{s} {low}..{high}" for s, (low, high) in sorted(plan.record.dim_bounds.items()) if high is not None]
    if bounded:
        # Triton checks a request's shape against dims only: a size past the artifact's bound reaches the backend
        passed += f"; the artifact bounds {', '.join(bounded)}, which dims cannot say: a request past a bound fails in the backend"
    return _check(f"dims:{plan.name}", problems, passed)


def _profiles_check(plan: ModelPlan, config) -> rm.PackageCheck:
    """The engine's one optimization profile, named by its instance group, spans every size validation ran: its ranges
    are the record's dim bounds (the report's, so this runs where TensorRT does not)."""
    problems = []
    profiles = [list(group.profile) for group in config.instance_group]
    if profiles != [["0"]]:
        problems.append(f"its instance groups name profiles {profiles}, and the engine has one, profile 0")
    ran: dict[str, set[int]] = {}
    for check in plan.checks:
        for part in check.shape.split(","):
            symbol, _, size = part.partition("=")
            if size.isdigit():
                ran.setdefault(symbol, set()).add(int(size))
    for symbol, sizes in sorted(ran.items()):
        low, high = plan.record.dim_bounds.get(symbol, [None, None])
        if low is None:
            problems.append(f"the report gives no profile range for {symbol}, which validation ran at {sorted(sizes)}")
        elif min(sizes) < low or high is not None and max(sizes) > high:
            problems.append(f"the profile takes {symbol} from {low} to {high}, and validation ran it at {sorted(sizes)}")
    bounds = plan.record.dim_bounds
    spans = ", ".join(f"{s} {bounds[s][0]}..{bounds[s][1]}" for s in sorted(ran) if s in bounds) or "static shapes"
    return _check(f"profiles:{plan.name}", problems, f"profile 0 ({spans}) covers every size validated")


def _files_check(plan: ModelPlan, folder: Path) -> rm.PackageCheck:
    """The model file and its companions where the platform looks, the ONNX external data the graph names beside it,
    and nothing else a server would load (another version folder would be served in place of this one)."""
    from convert.registry import REGISTRY

    version, platform = folder / VERSION, plan.platform
    wanted = [platform.model_file, *COMPANIONS.get(plan.artifact.format, ())]
    problems = [f"{VERSION}/{f} is missing, where {platform.value} looks for it" for f in wanted if not (version / f).exists()]
    if plan.artifact.format == "onnx" and (version / platform.model_file).is_file():
        try:
            REGISTRY.format("onnx").files_beside(version / platform.model_file)
        except ConvertError as exc:
            problems.append(exc.problem)
    placed = {f"{VERSION}/{p}" for _, _, p in _layout(plan.artifact)}
    present = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
    extra = sorted(present - placed - {CONFIG})
    if extra:
        problems.append(f"it holds files no artifact put there: {extra}")
    return _check(f"files:{plan.name}", problems, f"{', '.join(sorted(placed))}: where {platform.value} looks for them")


def _digest_check(artifact: PackedArtifact, version: Path) -> rm.PackageCheck:
    """The artifact's bytes in the version folder digest to the validated sha256. A file placed under another name
    (cnn.onnx as model.onnx) is digested under the name the validated digest gave it, so the combined digest compares."""
    name = f"digest:{artifact.key}"
    layout = _layout(artifact)
    missing = [placed for _, _, placed in layout if not (version / placed).is_file()]
    if missing:
        return rm.PackageCheck(name=name, status="failed", reason=f"files missing from {VERSION}/: {missing}")
    digests = [(digest_name, sha256_file(version / placed)) for digest_name, _, placed in layout]
    single = len(artifact.files) == 1 and artifact.files[0].is_file()
    packed = digests[0][1] if single else combine_digests(digests)
    if packed != artifact.sha256:
        return rm.PackageCheck(
            name=name, status="failed", reason=f"its bytes in the repository digest to {packed}, not the validated {artifact.sha256}"
        )
    return rm.PackageCheck(
        name=name, status="passed", reason=f"the validated bytes (sha256 {artifact.sha256[:12]}…): its checks hold for it"
    )
