"""The bad-input suite: every entry of BAD_INPUTS is run through the real command line and must give its exit code
(2: bad input, refused; 1: the model converts but an artifact is wrong), one paragraph on stderr naming the problem
and the next step, no traceback, nothing at a final path (a wrong artifact goes to OUT/failed/), and the user's files
untouched. A new source or format adds its bad inputs here."""

from __future__ import annotations

import hashlib
import io
import shutil
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from convert.safety import FAILED_FOLDER, LOCK_NAME, STAGING_PREFIX
from tests.conftest import CliRun, load_report, run_cli

X8 = ("--input", "x:float32[B,8]")
CNN_SPEC = ("--input", "x:float32[B,3,32,32]")


@dataclass(frozen=True)
class Files:
    """Where a case writes its inputs (``made``) and the session's fixture folders."""

    made: Path
    torch: Path
    keras: Path
    jax: Path

    def copy(self, source: Path, name: str) -> Path:
        target = self.made / name
        (shutil.copytree if source.is_dir() else shutil.copy)(source, target)
        return target

    def write(self, name: str, content: bytes) -> Path:
        (self.made / name).write_bytes(content)
        return self.made / name


@dataclass(frozen=True)
class Bad:
    name: str
    args: Callable[[Files], list[str]]  # the command line after `convert`, without --out unless ``own_out``
    exit_code: int
    says: tuple[str, ...]  # fragments of the one paragraph: the problem, then the next step
    own_out: bool = False  # the command line names its own output paths (inside the case's folder): no --out is added
    in_folder: bool = False  # run from the case's folder instead of the repository
    env: tuple[tuple[str, str], ...] = ()


def _truncated(files: Files) -> str:
    data = (files.torch / "cnn.pt2").read_bytes()
    return str(files.write("cut.pt2", data[: len(data) // 2]))


def _zip_with_garbage_member(files: Files) -> str:
    """A .pt2 whose members are intact but whose weights member was replaced by bytes torch cannot read."""
    target = files.made / "corrupt.pt2"
    with zipfile.ZipFile(files.torch / "cnn.pt2") as original, zipfile.ZipFile(target, "w") as corrupt:
        for info in original.infolist():
            data = original.read(info)
            corrupt.writestr(info, b"\x00garbage" * 16 if info.filename.endswith((".json", "version")) else data)
    return str(target)


def _module_of_a_missing_class(files: Files) -> str:
    """A whole pickled module whose class lived in a module that no longer exists."""
    import sys
    import types

    import torch

    module = types.ModuleType("vanished_models")
    exec("import torch\nclass Net(torch.nn.Linear):\n    pass\n", module.__dict__)  # a class defined in a throwaway module
    sys.modules["vanished_models"] = module
    try:
        torch.save(module.Net(8, 4), str(files.made / "custom.pt"))
    finally:
        del sys.modules["vanished_models"]
    return str(files.made / "custom.pt")


def _policy(files: Files, text: str, name: str = "promotion.yaml") -> str:
    """A promotion policy (or batch manifest) in the case's folder; its relative paths are relative to that folder."""
    return str(files.write(name, text.encode()))


def _symlinked_final(files: Files) -> list[str]:
    """An output folder whose torch_export artifact path is a symlink to the model itself."""
    model = files.copy(files.torch / "cnn.pt2", "cnn.pt2")
    out = files.made / "o"
    out.mkdir()
    (out / "cnn.pt2").symlink_to(model)
    return [str(model), "--to", "torch_export", "--out", str(out), "--force"]


def _linked_out(files: Files) -> list[str]:
    """--out is a symlink to the SavedModel folder that is the model."""
    model = files.copy(files.keras / "two_io_savedmodel", "saved")
    (files.made / "link").symlink_to(model, target_is_directory=True)
    return [str(model), "--trust-code", "--to", "onnx", "--out", str(files.made / "link"), "--force"]


def _gate_case(files: Files, *rendering: str) -> list[str]:
    files.copy(files.torch / "cnn.pt2", "cnn.pt2")
    files.write("last.json", b"{}")
    policy = _policy(files, "version: 1\nmodel: {path: cnn.pt2}\nrequire: {targets: [onnx]}\nout: o\n")
    return ["gate", policy, *rendering]


def _manifest_over_models(files: Files) -> list[str]:
    """A batch whose out is the manifest's folder and whose model named 'models' lives in models/: its folder is OUT/models."""
    (files.made / "models").mkdir()
    files.copy(files.torch / "cnn.pt2", "models/cnn.pt2")
    manifest = _policy(
        files,
        "version: 1\nout: .\nmodels:\n  - name: models\n    model: {path: models/cnn.pt2}\n    require: {targets: [onnx]}\n",
        "zoo.yaml",
    )
    return ["batch", manifest, "--force"]


def _npz(files: Files, name: str, **arrays) -> str:
    np.savez(files.made / name, **arrays)
    return str(files.made / name)


# archives: crafted files whose payload, were it run, opens PAYLOAD in the case's folder (``untouched`` then fails)
PAYLOAD = "payload-ran"


class _OpensPayload:
    def __init__(self, path: Path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def _payload_pickle(files: Files) -> bytes:
    import io

    import torch

    buffer = io.BytesIO()
    torch.save({"weight": _OpensPayload(files.made / PAYLOAD)}, buffer)
    return buffer.getvalue()


def _pt2_with(files: Files, name: str, replace: dict[str, bytes] | None = None, add: dict[str, bytes] | None = None) -> str:
    """cnn.pt2 with members replaced (by their path inside its folder) and added."""
    target = files.made / name
    with zipfile.ZipFile(files.torch / "cnn.pt2") as original, zipfile.ZipFile(target, "w") as copy:
        for info in original.infolist():
            copy.writestr(info, (replace or {}).get(info.filename.split("/", 1)[1], original.read(info)))
        for inner, data in (add or {}).items():
            copy.writestr(f"cnn/{inner}", data)
    return str(target)


def _old_layout_pt2(files: Files) -> str:
    """torch 2.7's layout, members at the root: torch.export.load falls back to it and unpickles its state dict."""
    import torch
    from torch._export.serde.schema import SCHEMA_VERSION
    from torch._export.serde.serialize import serialize

    artifact = serialize(torch.export.load(str(files.torch / "cnn.pt2")))
    target = files.made / "old.pt2"
    with zipfile.ZipFile(target, "w") as archive:
        archive.writestr("archive_format", "pt2")
        archive.writestr("version", ".".join(map(str, SCHEMA_VERSION)))
        archive.writestr("serialized_exported_program.json", artifact.exported_program)
        archive.writestr("serialized_state_dict.pt", _payload_pickle(files))
        archive.writestr("serialized_constants.pt", artifact.constants)
        archive.writestr("serialized_example_inputs.pt", artifact.example_inputs)
    return str(target)


def _shape_expression_pt2(files: Files) -> str:
    """cnn.pt2 whose first shape expression is Python: torch evaluates it with sympy.sympify."""
    import json

    with zipfile.ZipFile(files.torch / "cnn.pt2") as archive:
        text = archive.read("cnn/models/model.json").decode()
    at = text.index('"expr_str": "') + len('"expr_str": "')
    poisoned = text[:at] + json.dumps(f"open({str(files.made / PAYLOAD)!r}, 'w') and ")[1:-1] + text[at:]
    return _pt2_with(files, "expression.pt2", replace={"models/model.json": poisoned.encode()})


def _deflated_padding(archive: zipfile.ZipFile, name: str, head: bytes, padding: int = 64 << 20) -> None:
    """A member of ``head`` and ``padding`` spaces (64 MiB that deflate to about 64 KiB: a decompression bomb)."""
    info = zipfile.ZipInfo(name)
    info.compress_type = zipfile.ZIP_DEFLATED
    archive.writestr(info, head + b" " * padding, compresslevel=9)


def _padded_copy(source: Path, target: Path, member: str) -> str:
    """A copy of an archive whose ``member`` (its name inside the archive) is padded into a bomb."""
    with zipfile.ZipFile(source) as original, zipfile.ZipFile(target, "w") as copy:
        for info in original.infolist():
            if info.filename == member:
                _deflated_padding(copy, info.filename, original.read(info))
            else:
                copy.writestr(info, original.read(info))
    return str(target)


def _torchscript_bomb(files: Files) -> str:
    target = files.made / "bomb.torchscript.pt"
    shutil.copy(files.torch / "cnn.torchscript.pt", target)
    with zipfile.ZipFile(target, "a") as archive:
        _deflated_padding(archive, "cnn.torchscript/extra/padding.txt", b"")
    return str(target)


def _npz_bomb(files: Files) -> str:
    """One .npz of 10,923 CNN inputs (128 MiB of zeros) stored in about 128 KiB."""
    header = io.BytesIO()
    count = (128 << 20) // (3 * 32 * 32 * 4)
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": (count, 3, 32, 32)})
    target = files.made / "bomb.npz"
    with zipfile.ZipFile(target, "w") as archive:
        info = zipfile.ZipInfo("x.npy")
        info.compress_type = zipfile.ZIP_DEFLATED
        archive.writestr(info, header.getvalue() + bytes(count * 3 * 32 * 32 * 4), compresslevel=9)
    return str(target)


def _npz_folder_declaring_too_much(files: Files) -> str:
    """A folder of one .npz whose array header declares 120 GiB in a member of a few bytes (NumPy would allocate it)."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": (10**7, 3, 32, 32)})
    (files.made / "data").mkdir()
    with zipfile.ZipFile(files.made / "data" / "0.npz", "w") as archive:
        archive.writestr("x.npy", header.getvalue() + bytes(64))
    return str(files.made / "data")


BAD_INPUTS = [
    # corrupt, truncated, empty files and wrong extensions
    Bad("empty file", lambda f: [str(f.write("model.pt2", b"")), "--to", "onnx"], 2, ("is empty",)),
    Bad(
        "truncated zip",
        lambda f: [str(f.write("model.pt2", b"PK\x03\x04garbage-truncated")), "--to", "onnx"],
        2,
        ("cannot be read", "export it again"),
    ),
    Bad("truncated .pt2", lambda f: [_truncated(f), "--to", "onnx"], 2, ("cut.pt2",)),
    Bad(
        "corrupt .pt2 members",
        lambda f: [_zip_with_garbage_member(f), "--to", "onnx"],
        2,
        ("corrupt.pt2 is a torch.export archive that cannot be read", "export it again"),
    ),
    Bad("random bytes named .pt", lambda f: [str(f.write("model.pt", bytes(range(256)) * 16)), "--to", "onnx"], 2, ("model.pt",)),
    Bad("text named .keras", lambda f: [str(f.write("model.keras", b"not a model\n")), "--to", "onnx"], 2, ("model.keras",)),
    Bad(
        "truncated .keras",
        lambda f: [str(f.write("cut.keras", (f.keras / "two_io.keras").read_bytes()[:2000])), "--to", "onnx"],
        2,
        ("cut.keras",),
    ),
    Bad(
        "safetensors named .pt2",
        lambda f: [str(f.copy(f.torch / "cnn.safetensors", "weights.pt2")), "--to", "onnx"],
        2,
        ("safetensors", "--weights"),
    ),
    Bad("state dict as the model", lambda f: [str(f.torch / "cnn.state.pt"), "--to", "onnx"], 2, ("state dict", "--weights")),
    # directories where files are expected, files that are not there
    Bad(
        "empty folder as the model", lambda f: [str(f.made), "--to", "onnx"], 2, ("is a folder with no model in it", "Give the model file")
    ),
    Bad(
        "folder as --weights",
        lambda f: ["fixtures.torch_models:build_cnn", "--weights", str(f.made), *CNN_SPEC, "--to", "onnx"],
        2,
        ("--weights",),
    ),
    Bad(
        "folder as --example-inputs",
        lambda f: [str(f.torch / "cnn.pt2"), "--example-inputs", str(f.made), "--to", "onnx"],
        2,
        ("Is a directory", "numpy.savez"),
    ),
    Bad("missing model file", lambda f: [str(f.made / "nope.pt2"), "--to", "onnx"], 2, ("does not exist",)),
    Bad("unknown module", lambda f: ["no_such_pkg.models:build", "--to", "onnx"], 2, ("cannot import", "module.path:callable")),
    Bad("unknown factory", lambda f: ["fixtures.torch_models:no_such_builder", "--to", "onnx"], 2, ("no attribute",)),
    # code that would run on load
    Bad(
        "pickled module without --trust-code",
        lambda f: [str(f.torch / "cnn.pt"), *CNN_SPEC, "--to", "onnx"],
        2,
        ("pickled Python object", "SmallCNN", "--trust-code"),
    ),
    Bad(
        "TorchScript without --trust-code",
        lambda f: [str(f.torch / "cnn.torchscript.pt"), *CNN_SPEC, "--to", "onnx"],
        2,
        ("TorchScript", "--trust-code"),
    ),
    Bad("legacy .h5 without --trust-code", lambda f: [str(f.keras / "two_io.h5"), "--to", "onnx"], 2, ("--trust-code",)),
    Bad("SavedModel without --trust-code", lambda f: [str(f.keras / "two_io_savedmodel"), "--to", "onnx"], 2, ("--trust-code",)),
    Bad(
        "custom class that is gone", lambda f: [_module_of_a_missing_class(f), "--trust-code", *X8, "--to", "onnx"], 2, ("vanished_models",)
    ),
    # weights, params and specs that do not fit the model
    Bad(
        "weights of another model",
        lambda f: ["fixtures.torch_models:build_cnn", "--weights", str(f.torch / "lstm.safetensors"), *CNN_SPEC, "--to", "onnx"],
        2,
        ("do not fit the model",),
    ),
    Bad(
        "JAX params that are not msgpack",
        lambda f: [
            "fixtures.jax_models:apply_mlp",
            "--params",
            str(f.write("bad.params.msgpack", b"\x00\x01garbage")),
            "--input",
            "x:float32[B,28,28,1]",
            "--to",
            "onnx",
        ],
        2,
        ("bad.params.msgpack",),
    ),
    Bad(
        "spec naming no input",
        lambda f: ["fixtures.torch_models:build_cnn", "--input", "pixels:float32[B,3,32,32]", "--to", "onnx"],
        2,
        ("'pixels' is not an input", "(x)"),
    ),
    Bad(
        "spec of the wrong shape",
        lambda f: ["fixtures.torch_models:build_cnn", "--input", "x:float32[B,5,32,32]", "--to", "onnx"],
        2,
        ("the source model fails on inputs generated from its specs", "--input"),
    ),
    Bad(
        "spec with an unknown dtype",
        lambda f: ["fixtures.torch_models:build_cnn", "--input", "x:float33[B,3,32,32]", "--to", "onnx"],
        2,
        ("float33",),
    ),
    Bad("no spec for a module", lambda f: ["fixtures.torch_models:build_cnn", "--to", "onnx"], 2, ("--input",)),
    Bad(
        "example inputs naming no input",
        lambda f: [
            str(f.torch / "cnn.pt2"),
            "--example-inputs",
            _npz(f, "wrong.npz", pixels=np.zeros((2, 3, 32, 32), np.float32)),
            "--to",
            "onnx",
        ],
        2,
        ("pixels",),
    ),
    Bad(
        "calibration data of the wrong shape",
        lambda f: [
            str(f.torch / "cnn.pt2"),
            "--to",
            "onnx",
            "--optimize",
            "int8",
            "--calibration-data",
            _npz(f, "calib.npz", x=np.zeros((2, 3, 8, 8), np.float32)),
        ],
        2,
        ("calib.npz does not fit the model", "arrays by input name"),
    ),
    Bad(
        "a float among the outputs",
        lambda f: ["fixtures.torch_models:build_returns_a_float", *X8, "--to", "onnx"],
        2,
        ("returns a float", "Return tensors"),
    ),
    # conversions that cannot be done
    Bad(
        "unsupported op",
        lambda f: ["fixtures.torch_models:build_unsupported_op", "--input", "x:float32[B,4,4]", "--to", "onnx"],
        2,
        ("the onnx export failed with every strategy", "The report lists every attempt"),
    ),
    Bad(
        "unsupported opset",
        lambda f: ["fixtures.torch_models:build_cnn", *CNN_SPEC, "--to", "onnx", "--opset", "1"],
        2,
        ("opset", "The report lists every attempt"),
    ),
    # models that convert, but wrong: exit 1, the artifact kept in OUT/failed/
    Bad(
        "NaN only in the artifact",
        lambda f: ["fixtures.torch_models:build_nan_in_onnx", *X8, "--to", "onnx"],
        1,
        ("failed validation", "NaN", "--tolerance"),
    ),
    Bad(
        "NaN in the source model",
        lambda f: ["fixtures.torch_models:build_nan_in_source", *X8, "--to", "onnx"],
        1,
        ("the source model's own output has NaN or Inf",),
    ),
    Bad("an output vanishes in ONNX", lambda f: ["fixtures.torch_models:build_drops_output_in_onnx", *X8, "--to", "onnx"], 1, ("aux",)),
    Bad("an empty output", lambda f: ["fixtures.torch_models:build_empty_output", *X8, "--to", "onnx"], 1, ("empty output",)),
    Bad("wrong values in ONNX", lambda f: ["fixtures.torch_models:build_off_in_onnx", *X8, "--to", "onnx"], 1, ("scores", "max abs error")),
    # options
    Bad("unknown target", lambda f: [str(f.torch / "cnn.pt2"), "--to", "tflite2"], 2, ("unknown target format", "Choose from")),
    Bad(
        "unreadable spec",
        lambda f: ["fixtures.torch_models:build_cnn", "--input", "x:float32[B,3,32", "--to", "onnx"],
        2,
        ("cannot read the input spec",),
    ),
    Bad(
        "unreadable tolerance",
        lambda f: [str(f.torch / "cnn.pt2"), "--to", "onnx", "--tolerance", "atol=abc"],
        2,
        ("cannot read the tolerance",),
    ),
    Bad("tolerance for no output", lambda f: [str(f.torch / "cnn.pt2"), "--to", "onnx", "--tolerance", "logitz:atol=1"], 2, ("'logitz'",)),
    Bad("dim for no symbol", lambda f: [str(f.torch / "cnn.pt2"), "--to", "onnx", "--dim", "Q=2"], 2, ("symbol Q",)),
    Bad(
        "shapes too large for memory",
        lambda f: ["fixtures.torch_models:build_cnn", *CNN_SPEC, "--dim", "B=100000000", "--to", "onnx"],
        2,
        ("GiB of memory", "GiB available", "--dim", "--samples"),
    ),
    # a run never replaces, removes or writes into what it reads, with or without --force
    Bad(
        "artifact over the model, --out .",
        lambda f: [f.copy(f.torch / "cnn.pt2", "cnn.pt2").name, "--to", "torch_export,onnx", "--out", ".", "--force"],
        2,
        ("torch_export artifact", "would replace the model cnn.pt2", "Choose output paths outside"),
        own_out=True,
        in_folder=True,
    ),
    Bad(
        "report over the model",
        lambda f: [
            str(f.copy(f.torch / "cnn.pt2", "src.pt2")),
            "--to",
            "onnx",
            "--out",
            str(f.made / "o"),
            "--report-json",
            str(f.made / "src.pt2"),
            "--force",
        ],
        2,
        ("JSON report", "would replace the model", "--report-json"),
        own_out=True,
    ),
    Bad(
        "report over the calibration data",
        lambda f: [
            str(f.torch / "cnn.pt2"),
            "--to",
            "onnx",
            "--optimize",
            "int8",
            "--calibration-data",
            _npz(f, "calib.npz", x=np.zeros((2, 3, 32, 32), np.float32)),
            "--report-json",
            str(f.made / "calib.npz"),
            "--force",
        ],
        2,
        ("would replace the calibration data",),
    ),
    Bad(
        "output folder is the SavedModel",
        lambda f: [
            str(f.copy(f.keras / "two_io_savedmodel", "saved_model_dir")),
            "--trust-code",
            "--to",
            "savedmodel,onnx",
            "--out",
            str(f.made / "saved_model_dir"),
            "--force",
        ],
        2,
        ("output folder", "would write into the model", "--out"),
        own_out=True,
    ),
    Bad(
        "output folder inside the SavedModel",
        lambda f: [
            str(f.copy(f.keras / "two_io_savedmodel", "sm")),
            "--trust-code",
            "--to",
            "onnx",
            "--out",
            str(f.made / "sm" / "variables" / "o"),
        ],
        2,
        ("would land inside the model",),
        own_out=True,
    ),
    Bad(
        "output folder is the model file",
        lambda f: [str(f.copy(f.torch / "cnn.pt2", "cnn.pt2")), "--to", "onnx", "--out", str(f.made / "cnn.pt2")],
        2,
        ("would write into the model",),
        own_out=True,
    ),
    Bad("artifact path is a symlink to the model", _symlinked_final, 2, ("resolves to", "would replace the model"), own_out=True),
    Bad("output folder is a symlink to the model", _linked_out, 2, ("resolves to", "would write into the model"), own_out=True),
    Bad(
        "artifact over the weights",
        lambda f: [
            "fixtures.torch_models:build_cnn",
            "--weights",
            str(f.copy(f.torch / "cnn.safetensors", "build_cnn.onnx")),
            *CNN_SPEC,
            "--to",
            "onnx",
            "--out",
            str(f.made),
            "--force",
        ],
        2,
        ("onnx artifact", "would replace the weights"),
        own_out=True,
    ),
    Bad(
        "gate HTML over the model",
        lambda f: _gate_case(f, "--html", str(f.made / "cnn.pt2")),
        2,
        ("HTML rendering", "would replace the model"),
        own_out=True,
    ),
    Bad(
        "gate Markdown over the policy",
        lambda f: _gate_case(f, "--markdown", str(f.made / "promotion.yaml")),
        2,
        ("Markdown rendering", "would replace the policy"),
        own_out=True,
    ),
    Bad(
        "gate JUnit over the baseline",
        lambda f: _gate_case(f, "--baseline", str(f.made / "last.json"), "--junit", str(f.made / "last.json")),
        2,
        ("JUnit rendering", "would replace the baseline report"),
        own_out=True,
    ),
    Bad(
        "gate MLflow store over the model",
        lambda f: _gate_case(f, "--mlflow"),
        2,
        ("MLflow's local store", "would replace the model"),
        own_out=True,
        env=(("MLFLOW_TRACKING_URI", "sqlite:///cnn.pt2"),),
        in_folder=True,
    ),
    Bad(
        "policy out is the model's folder",
        lambda f: [
            "gate",
            _policy(
                f,
                f"version: 1\nmodel: {{path: {f.copy(f.torch / 'cnn.pt2', 'cnn.pt2').name}}}\nrequire: {{targets: [torch_export]}}\nout: .\n",
            ),
            "--force",
        ],
        2,
        ("torch_export artifact", "would replace the model"),
        own_out=True,
    ),
    Bad(
        "policy out inside the SavedModel",
        lambda f: [
            "gate",
            _policy(
                f,
                f"version: 1\nmodel: {{path: {f.copy(f.keras / 'two_io_savedmodel', 'sm').name}, trust_code: true}}\n"
                "require: {targets: [onnx]}\nout: sm/assets\n",
            ),
        ],
        2,
        ("would land inside the model",),
        own_out=True,
    ),
    Bad("manifest out holds a model's folder", _manifest_over_models, 2, ("folder of the model 'models'", "would remove"), own_out=True),
    Bad(
        "manifest out is a model's SavedModel",
        lambda f: [
            "batch",
            _policy(
                f,
                f"version: 1\nout: {f.copy(f.keras / 'two_io_savedmodel', 'sm').name}\nmodels:\n  - name: m\n"
                "    model: {path: sm, trust_code: true}\n    require: {targets: [onnx]}\n",
                "zoo.yaml",
            ),
        ],
        2,
        ("batch folder", "would write into the model of 'm'"),
        own_out=True,
    ),
    # archives: checked before any loader reads them (a payload that ran would leave PAYLOAD: ``untouched`` fails)
    Bad("a .pt2 in torch's old layout", lambda f: [_old_layout_pt2(f), "--to", "onnx"], 2, ("old layout", "--trust-code")),
    Bad(
        "a .pt2 with a legacy pickled constants member",
        lambda f: [_pt2_with(f, "legacy.pt2", add={"data/constants/model.pt": _payload_pickle(f)}), "--to", "onnx"],
        2,
        ("data/constants/model.pt", "--trust-code"),
    ),
    Bad(
        "a .pt2 with a member torch does not write",
        lambda f: [_pt2_with(f, "unknown.pt2", add={"data/notes.pkl": _payload_pickle(f)}), "--to", "onnx"],
        2,
        ("does not write (data/notes.pkl)", "--trust-code"),
    ),
    Bad(
        "a .pt2 whose shape expression is Python",
        lambda f: [_shape_expression_pt2(f), "--to", "onnx"],
        2,
        ("not plain sympy", "--trust-code"),
    ),
    Bad(
        "a .pt2 decompression bomb",
        lambda f: [_padded_copy(f.torch / "cnn.pt2", f.made / "bomb.pt2", "cnn/models/model.json"), "--to", "onnx"],
        2,
        ("'cnn/models/model.json', that would inflate from", "Refused before reading it"),
    ),
    Bad(
        "a .keras decompression bomb",
        lambda f: [_padded_copy(f.keras / "two_io.keras", f.made / "bomb.keras", "config.json"), "--to", "onnx"],
        2,
        ("'config.json', that would inflate from", "Refused before reading it"),
    ),
    Bad(
        "a trusted TorchScript decompression bomb",
        lambda f: [_torchscript_bomb(f), "--trust-code", *CNN_SPEC, "--to", "onnx"],
        2,
        ("'cnn.torchscript/extra/padding.txt', that would inflate from",),
    ),
    Bad(
        "an .npz decompression bomb as --data",
        lambda f: [str(f.torch / "cnn.pt2"), "--data", _npz_bomb(f), "--to", "onnx"],
        2,
        ("'x.npy', that would inflate from", ".npz"),
    ),
    Bad(
        "an .npz declaring more than it holds in a --data folder",
        lambda f: [str(f.torch / "cnn.pt2"), "--data", _npz_folder_declaring_too_much(f), "--to", "onnx"],
        2,
        ("whose header declares shape (10000000, 3, 32, 32)",),
    ),
]


def _digests(*folders: Path) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for folder in folders for p in sorted(folder.rglob("*")) if p.is_file()}


@dataclass
class Outcome:
    run: CliRun
    out: Path
    untouched: bool  # the case's input files and the fixture files are as they were


@pytest.fixture(scope="module")
def outcomes(torch_files, keras_files, jax_files, tmp_path_factory) -> dict[str, Outcome]:
    """Every bad input through the command line, one after the other in this process (each is mostly a refusal)."""
    prepared = []
    for bad in BAD_INPUTS:
        root = tmp_path_factory.mktemp("bad_input")
        files = Files(root / "in", torch_files, keras_files, jax_files)
        files.made.mkdir()
        prepared.append((bad, files, bad.args(files), root / "out"))

    def attempt(case) -> Outcome:
        bad, files, args, out = case
        before = _digests(files.made, torch_files)
        run = run_cli(*args, *(() if bad.own_out else ("--out", str(out))), cwd=files.made if bad.in_folder else None, env=dict(bad.env))
        return Outcome(run, out, _digests(files.made, torch_files) == before)

    return {case[0].name: attempt(case) for case in prepared}


@pytest.mark.parametrize("bad", BAD_INPUTS, ids=[b.name for b in BAD_INPUTS])
def test_bad_input(bad: Bad, outcomes):
    run, out = outcomes[bad.name].run, outcomes[bad.name].out
    assert run.returncode == bad.exit_code, run.output
    assert "Traceback" not in run.output
    errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert errors, run.output
    paragraph = errors[0]
    for fragment in bad.says:
        assert fragment in paragraph, paragraph
    assert outcomes[bad.name].untouched, "the user's files were changed"
    if out.exists():  # a failed export or a wrong artifact: the report, and wrong artifacts only under failed/
        # the report, and the run's log beside it: what the exporters said while they failed
        leftovers = {p.name for p in out.iterdir()} - {"report.json", "report.log", FAILED_FOLDER}
        assert not leftovers, f"left at a final path: {leftovers}"
        assert not any(p.name.startswith((STAGING_PREFIX, LOCK_NAME)) for p in out.rglob(".*"))
        report = load_report(out / "report.json")
        assert report["exit_code"] == bad.exit_code and not report["passed"]
    if bad.exit_code == 1:
        assert "kept at" in paragraph and f"/{FAILED_FOLDER}/" in paragraph
        assert any((out / FAILED_FOLDER).iterdir())


class _Payload:
    def __reduce__(self):
        import os

        return (os.system, (f"touch {MARKER}",))


MARKER = "/nonexistent"


def test_a_malicious_pickle_payload_never_runs(tmp_path):
    """torch's weights-only unpickler reads the file before anything else does; the payload's side effect never happens."""
    global MARKER
    marker = tmp_path / "payload-ran"
    MARKER = str(marker)
    import torch

    evil = tmp_path / "evil.pt"
    torch.save({"model": _Payload()}, str(evil))
    run = run_cli(str(evil), "--input", "x:float32[B,4]", "--to", "onnx", "--out", str(tmp_path / "o"))
    assert run.returncode == 2 and "Traceback" not in run.output, run.output
    assert "--trust-code" in run.stderr
    assert not marker.exists()
    assert not (tmp_path / "o").exists()
