"""Archives are checked before any loader reads them, and a crafted .pt2 never runs code without --trust-code.

Each crafted archive is built here: a pickle whose loading opens a marker file (the sign that code ran), a .pt2 laid
out as torch's old format or with legacy pickled members, a program whose shape expression is Python that sympy would
evaluate, members that declare far more than they store. The command-line cases run the real CLI and check the exit
code, the one paragraph, that no traceback is shown and that the marker was never made.
"""

from __future__ import annotations

import io
import json
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest

from convert.errors import ConvertError
from tests.conftest import run_cli


class _Opens:
    """Unpickling it opens (creates) the file at ``path``: the marker that the file's code ran."""

    def __init__(self, path: Path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def _torch_pickle(marker: Path) -> bytes:
    import torch

    buffer = io.BytesIO()
    torch.save({"weight": _Opens(marker)}, buffer)
    return buffer.getvalue()


class _Small:
    """A module with a parameter, a buffer and a tensor constant: every member kind torch.export.save writes."""

    def build(self):
        import torch

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.linear = torch.nn.Linear(8, 4)
                self.register_buffer("shift", torch.ones(4))
                self.scale = torch.tensor([2.0, 2.0, 2.0, 2.0])

            def forward(self, x):
                return self.linear(x) * self.scale + self.shift

        return Net().eval()


def _program(dynamic: bool = True):
    import torch

    batch = {"x": {0: torch.export.Dim("B", max=64)}} if dynamic else None
    return torch.export.export(_Small().build(), (torch.randn(2, 8),), dynamic_shapes=batch)


@pytest.fixture(scope="module")
def genuine(tmp_path_factory) -> Path:
    """torch.export.save of a small program with a dynamic batch: the members torch 2.13 writes."""
    import torch

    path = tmp_path_factory.mktemp("genuine") / "small.pt2"
    torch.export.save(_program(), str(path))
    return path


def _rewrite(source: Path, target: Path, replace: dict[str, bytes] | None = None, add: dict[str, bytes] | None = None) -> Path:
    """A copy of ``source`` with members replaced (names inside its folder) and added (full names)."""
    replace = replace or {}
    with zipfile.ZipFile(source) as original, zipfile.ZipFile(target, "w") as copy:
        prefix = original.namelist()[0].split("/", 1)[0]
        for info in original.infolist():
            inner = info.filename.split("/", 1)[1]
            copy.writestr(info, replace.get(inner, original.read(info)))
        for name, data in (add or {}).items():
            copy.writestr(name.replace("PREFIX", prefix), data)
    return target


def _old_layout(path: Path, marker: Path) -> Path:
    """torch 2.7's layout: members at the zip's root, the state dict a full pickle (torch.export.load falls back to it)."""
    from torch._export.serde.schema import SCHEMA_VERSION
    from torch._export.serde.serialize import serialize

    artifact = serialize(_program(dynamic=False))
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive_format", "pt2")
        archive.writestr("version", ".".join(map(str, SCHEMA_VERSION)))
        archive.writestr("serialized_exported_program.json", artifact.exported_program)
        archive.writestr("serialized_state_dict.pt", _torch_pickle(marker) if marker else artifact.state_dict)
        archive.writestr("serialized_constants.pt", artifact.constants)
        archive.writestr("serialized_example_inputs.pt", artifact.example_inputs)
    return path


def _legacy_member(genuine: Path, path: Path, marker: Path, folder: str) -> Path:
    """A genuine program plus one legacy member, PREFIX/data/<folder>/model.pt, a pickle torch prefers to the config."""
    return _rewrite(genuine, path, add={f"PREFIX/data/{folder}/model.pt": _torch_pickle(marker)})


def _evaluated_expression(genuine: Path, path: Path, marker: Path) -> Path:
    """A genuine program whose shape expression is Python: torch hands expr_str to sympy.sympify, which evals it."""
    with zipfile.ZipFile(genuine) as archive:
        text = archive.read(next(n for n in archive.namelist() if n.endswith("models/model.json"))).decode()
    original = json.loads(text)
    found = []

    def poison(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "expr_str" and isinstance(value, str) and not found:
                    found.append(value)
                    node[key] = f"open({str(marker)!r}, 'w') and {value}"
                else:
                    poison(value)
        elif isinstance(node, list):
            for value in node:
                poison(value)

    poison(original)
    assert found, "the program has no symbolic shape"
    return _rewrite(genuine, path, replace={"models/model.json": json.dumps(original).encode()})


def _calls_a_function(genuine: Path, path: Path, marker: Path) -> Path:
    """A genuine program whose first node calls torch.os.system: torch resolves any dotted name under torch by getattr
    (its verifier refuses it today; this tool refuses it before torch reads the file)."""
    with zipfile.ZipFile(genuine) as archive:
        program = json.loads(archive.read(next(n for n in archive.namelist() if n.endswith("models/model.json"))))
    node = program["graph_module"]["graph"]["nodes"][0]
    node["target"] = "torch.os.system"
    node["inputs"] = [{"name": "command", "arg": {"as_string": f"touch {marker}"}, "kind": 1}]
    return _rewrite(genuine, path, replace={"models/model.json": json.dumps(program).encode()})


def _pickled_weight(genuine: Path, path: Path, marker: Path) -> Path:
    """A weight flagged use_pickle in its config, its member a full pickle."""
    with zipfile.ZipFile(genuine) as archive:
        config = json.loads(archive.read(next(n for n in archive.namelist() if n.endswith("model_weights_config.json"))))
    entry = next(iter(config["config"].values()))
    entry["use_pickle"] = True
    return _rewrite(
        genuine,
        path,
        replace={
            "data/weights/model_weights_config.json": json.dumps(config).encode(),
            f"data/weights/{entry['path_name']}": _torch_pickle(marker),
        },
    )


def _bomb_member(archive: zipfile.ZipFile, name: str, head: bytes, padding: int) -> None:
    """A deflated member of ``head`` followed by ``padding`` spaces (valid JSON, about 1000 times its stored size)."""
    info = zipfile.ZipInfo(name)
    info.compress_type = zipfile.ZIP_DEFLATED
    archive.writestr(info, head + b" " * padding, compresslevel=9)


def _pt2_bomb(genuine: Path, path: Path) -> Path:
    """A genuine program whose graph JSON is padded to 64 MiB, deflated to about 64 KiB."""
    with zipfile.ZipFile(genuine) as original, zipfile.ZipFile(path, "w") as copy:
        for info in original.infolist():
            if info.filename.endswith("models/model.json"):
                _bomb_member(copy, info.filename, original.read(info), 64 << 20)
            else:
                copy.writestr(info, original.read(info))
    return path


def _patched(data: bytes, name: str, **fields: int) -> bytes:
    """The archive's bytes with fields of the central-directory entry of ``name`` changed (what a crafted file declares)."""
    offsets = {"compress_size": 20, "file_size": 24, "header_offset": 42}
    data = bytearray(data)
    at = data.find(b"PK\x01\x02")
    while at >= 0:
        length = struct.unpack_from("<H", data, at + 28)[0]
        if data[at + 46 : at + 46 + length].decode() == name:
            for field, value in fields.items():
                struct.pack_into("<I", data, at + offsets[field], value)
            return bytes(data)
        at = data.find(b"PK\x01\x02", at + 46)
    raise AssertionError(f"no member {name}")


def _zip(members: dict[str, bytes], deflate: bool = False) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


# --- the shared check, on archives crafted byte by byte ---------------------------------------------------------------


def test_real_archives_pass(genuine, tmp_path):
    from convert.archives import check_archive, check_npz

    assert check_archive(genuine)
    arrays = tmp_path / "masks.npz"
    np.savez_compressed(arrays, attention_mask=np.ones((64, 4096), np.int64), ids=np.arange(64 * 4096).reshape(64, 4096))
    assert check_npz(arrays)


@pytest.mark.parametrize(
    "craft, says",
    [
        (lambda: _patched(_zip({"a": b"x" * 100, "b": b"y"}, deflate=True), "a", file_size=3 << 30), "would inflate from"),
        (lambda: _patched(_zip({"a": b"x" * 100}), "a", file_size=5000), "declares 4.9 KiB but stores 100 bytes"),
        (lambda: _patched(_zip({"a": b"x" * 100}), "a", compress_size=10 << 20, file_size=10 << 20), "beyond the end of the file"),
        (lambda: _patched(_zip({"a": b"x" * 100, "b": b"x" * 100}), "b", header_offset=0), "overlap"),
        (lambda: _zip({"a/config.json": b"{}", "a/Config.json": b"{}"}), "differ only in case"),
        (lambda: _zip({"a/config.json@x": b"{}"}).replace(b"config.json@x", b"config.json\0x"), "NUL byte"),
        (lambda: bytes(100) + _zip({"a/config.json": b"{}"}), "100 bytes away from where its directory says"),
    ],
    ids=[
        "declared 3 GiB",
        "stored member declaring more",
        "stored beyond the file",
        "overlapping members",
        "case twins",
        "NUL name",
        "shifted",
    ],
)
def test_crafted_central_directories_are_refused(craft, says, tmp_path):
    from convert.archives import check_archive

    path = tmp_path / "crafted.zip"
    path.write_bytes(craft())
    with pytest.raises(ConvertError, match=says) as raised:
        check_archive(path)
    assert "\n" not in raised.value.paragraph() and str(path) in raised.value.paragraph()


def test_duplicate_names_are_refused(tmp_path):
    from convert.archives import check_archive

    path = tmp_path / "twins.zip"
    with pytest.warns(UserWarning, match="Duplicate name"), zipfile.ZipFile(path, "w") as archive:
        archive.writestr("m/data/weights/model_weights_config.json", b'{"config": {}}')
        archive.writestr("m/data/weights/model_weights_config.json", b'{"config": {}}')
    with pytest.raises(ConvertError, match="two members named 'm/data/weights/model_weights_config.json'"):
        check_archive(path)


def test_the_total_is_bounded_by_the_file_size(tmp_path):
    """Many members each under the ratio floor still cannot inflate past max_ratio times the file in all."""
    from convert.archives import Limits, check_archive

    path = tmp_path / "many.zip"
    path.write_bytes(_zip({f"m{i}": bytes(900 << 10) for i in range(8)}, deflate=True))
    assert check_archive(path)  # 7 MiB from ~8 KiB: under the 256 MiB floor for small files
    with pytest.raises(ConvertError, match="in all, more than"):
        check_archive(path, limits=Limits(total_floor=1 << 20))
    with pytest.raises(ConvertError, match="members, more than"):
        check_archive(path, limits=Limits(max_members=4))


def test_data_arrays_may_compress_well_but_not_declare_more_than_they_hold(tmp_path):
    from convert.archives import DATA, MODEL, check_npz

    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": (10**10, 8)})
    path = tmp_path / "huge.npz"
    path.write_bytes(_zip({"x.npy": header.getvalue() + bytes(64)}))
    with pytest.raises(ConvertError, match=r"'x', whose header declares shape \(10000000000, 8\)"):
        check_npz(path)
    assert DATA.ratio_floor > MODEL.ratio_floor


# --- .pt2: the members torch.export.save writes, and nothing else -------------------------------------------------------


def _without_example_inputs(program):
    """A program as torch.export.save writes one whose example inputs are gone (an empty sample-inputs member)."""
    program.example_inputs = None
    return program


def test_programs_torch_writes_have_no_reasons(tmp_path):
    import torch

    from convert.backends.torch import pt2_code_reasons

    saved = {
        "dynamic": lambda p: torch.export.save(_program(), p),
        "static": lambda p: torch.export.save(_program(dynamic=False), p),
        "extra files": lambda p: torch.export.save(_program(), p, extra_files={"note.txt": "hello"}),
        "no weights": lambda p: torch.export.save(torch.export.export(torch.nn.ReLU(), (torch.randn(2),)), p),
        "no sample inputs": lambda p: torch.export.save(_without_example_inputs(_program()), p),
    }
    for name, save in saved.items():
        path = tmp_path / f"{name.replace(' ', '_')}.pt2"
        save(str(path))
        assert pt2_code_reasons(path) == [], name
        assert torch.export.load(str(path)) is not None


@pytest.mark.parametrize(
    "craft, says",
    [
        (lambda g, p, m: _old_layout(p, m), "old layout"),
        (lambda g, p, m: _legacy_member(g, p, m, "constants"), "data/constants/model.pt"),
        (lambda g, p, m: _legacy_member(g, p, m, "weights"), "data/weights/model.pt"),
        (lambda g, p, m: _rewrite(g, p, add={"PREFIX/data/extra.pkl": _torch_pickle(m)}), "data/extra.pkl"),
        (lambda g, p, m: _evaluated_expression(g, p, m), "shape expression"),
        (lambda g, p, m: _pickled_weight(g, p, m), "stored as a pickle"),
        (lambda g, p, m: _calls_a_function(g, p, m), "calls 'torch.os.system', which is not an operator"),
    ],
    ids=["old layout", "legacy constants", "legacy weights", "unknown member", "evaluated expression", "use_pickle", "calls a function"],
)
def test_crafted_programs_are_flagged_before_torch_reads_them(genuine, tmp_path, craft, says):
    from convert.backends.torch import pt2_code_reasons

    marker = tmp_path / "code-ran"
    path = craft(genuine, tmp_path / "crafted.pt2", marker)
    reasons = pt2_code_reasons(path)
    assert any(says in reason for reason in reasons), reasons
    assert not marker.exists()


@pytest.mark.parametrize(
    "craft, says",
    [
        (lambda g, p, m: _old_layout(p, m), "old layout"),
        (lambda g, p, m: _legacy_member(g, p, m, "constants"), "data/constants/model.pt"),
        (lambda g, p, m: _evaluated_expression(g, p, m), "shape expression"),
    ],
    ids=["old layout", "legacy constants", "evaluated expression"],
)
def test_crafted_programs_never_run_code_from_the_command_line(genuine, tmp_path, craft, says):
    marker = tmp_path / "code-ran"
    path = craft(genuine, tmp_path / "crafted.pt2", marker)
    done = run_cli(str(path), "--to", "onnx", "--out", str(tmp_path / "out"))
    assert not marker.exists(), "the file's code ran"
    assert done.returncode == 2, done.output
    assert "Traceback" not in done.output, done.output
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr
    assert says in errors[0] and "--trust-code" in errors[0], errors[0]


def test_a_trusted_old_layout_loads_without_torchs_traceback(tmp_path):
    """--trust-code lets torch read the old layout; its own logged fallback traceback stays off the terminal."""
    path = _old_layout(tmp_path / "old.pt2", None)
    done = run_cli(str(path), "--trust-code", "--to", "onnx", "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.output
    assert "Traceback" not in done.output, done.output


def test_a_pt2_bomb_is_refused_before_it_is_read(genuine, tmp_path):
    path = _pt2_bomb(genuine, tmp_path / "bomb.pt2")
    assert path.stat().st_size < 1 << 20
    done = run_cli(str(path), "--to", "onnx", "--out", str(tmp_path / "out"))
    assert done.returncode == 2, done.output
    assert "Traceback" not in done.output
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "models/model.json" in errors[0] and "would inflate from" in errors[0], done.stderr
    assert not (tmp_path / "out" / "bomb.onnx").exists()


def test_sample_inputs_zip_inside_the_pt2_is_checked_too(genuine, tmp_path):
    """data/sample_inputs/model.pt is itself a torch.save zip: its members are held to the same limits."""
    from convert.backends.torch import pt2_code_reasons

    with zipfile.ZipFile(genuine) as archive:
        inner = archive.read(next(n for n in archive.namelist() if n.endswith("sample_inputs/model.pt")))
    bomb = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(inner)) as original, zipfile.ZipFile(bomb, "w") as copy:
        for info in original.infolist():
            copy.writestr(info, original.read(info))
        _bomb_member(copy, original.namelist()[0].split("/")[0] + "/data/9", b"", 64 << 20)
    path = _rewrite(genuine, tmp_path / "inner.pt2", replace={"data/sample_inputs/model.pt": bomb.getvalue()})
    with pytest.raises(ConvertError, match="sample_inputs/model.pt.*would inflate from"):
        pt2_code_reasons(path)


def test_graph_calls_that_reach_files_or_the_network_and_powers_of_numbers_are_not_plain():
    """aten::from_file maps a file writable and aten::save writes one: a graph may not call them, nor profiler,
    debugger or collective operators; a power of numbers (10**(10**10)) is evaluated by sympy as the file loads."""
    from convert.backends.torch import plain_expression, plain_target

    assert plain_target("torch.ops.aten.add.Tensor") and plain_target("torch.ops.aten.__and__.Tensor")
    for target in ("aten.from_file.default", "aten.save.default", "debugprims.load_tensor.default", "_c10d_functional.all_reduce.default"):
        assert not plain_target(f"torch.ops.{target}"), target
    assert plain_expression("Pow(Symbol('s0', positive=True, integer=True), Integer(2))") and plain_expression("2**s0")
    assert not plain_expression("Pow(Integer(10), Pow(Integer(10), Integer(10)))") and not plain_expression("10**10**10")
    assert not plain_expression("Integer(" + "9" * 50 + ")")
