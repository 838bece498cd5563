"""The archive packager's structural checks read the archive back and fail when it is not what was validated: other
bytes for an artifact, a member the manifest does not name, a member outside the archive."""

from __future__ import annotations

import zipfile

import pytest

from convert.packagers.archive import MANIFEST, ModelArchive
from convert.packagers.base import PackageJob, PackedArtifact
from convert.reports import model as rm
from convert.safety import sha256_files


def _job(tmp_path) -> PackageJob:
    single = tmp_path / "m.onnx"
    single.write_bytes(b"onnx bytes")
    data = tmp_path / "m.onnx.data"
    data.write_bytes(b"weights")
    folder = tmp_path / "m_openvino"
    folder.mkdir()
    (folder / "model.xml").write_text("<net/>")
    (folder / "model.bin").write_bytes(b"\0" * 8)
    artifacts = (
        PackedArtifact("onnx", "onnx", "fp32", single, (single, data), sha256_files([single, data])),
        PackedArtifact("openvino", "openvino", "fp32", folder, (folder,), sha256_files([folder])),
    )
    report = rm.Report(tool_version="0", created_at="now", environment=rm.Environment(python="3", platform="linux"))
    staging = tmp_path / "staging"
    staging.mkdir()
    return PackageJob(folder=staging, stem="m", artifacts=artifacts, report=report)


def _rewritten(path, replace: dict[str, bytes] = {}, add: dict[str, bytes] = {}) -> None:  # noqa: B006
    with zipfile.ZipFile(path) as old:
        members = {name: old.read(name) for name in old.namelist()}
    members.update(replace)
    members.update(add)
    with zipfile.ZipFile(path, "w") as new:
        for name, data in members.items():
            new.writestr(name, data)


def test_an_archive_of_the_validated_bytes_passes_every_check(tmp_path):
    job = _job(tmp_path)
    packager = ModelArchive()
    path = packager.build(job)
    checks = packager.check(path, job)
    assert [(c.name, c.status) for c in checks] == [
        ("archive", "passed"),
        ("manifest", "passed"),
        ("digest:onnx", "passed"),
        ("digest:openvino", "passed"),
    ]
    with zipfile.ZipFile(path) as archive:
        assert sorted(archive.namelist()) == sorted(
            [MANIFEST, "onnx/m.onnx", "onnx/m.onnx.data", "openvino/m_openvino/model.bin", "openvino/m_openvino/model.xml"]
        )


@pytest.mark.parametrize(
    "change, failed",
    [
        ({"replace": {"openvino/m_openvino/model.bin": b"\1" * 8}}, "digest:openvino"),
        ({"replace": {"onnx/m.onnx.data": b"other"}}, "digest:onnx"),
        ({"add": {"extra.txt": b"not in the manifest"}}, "manifest"),
        ({"add": {"../outside.txt": b"x"}}, "archive"),
    ],
)
def test_an_archive_that_is_not_what_was_validated_fails_the_check_that_says_why(tmp_path, change, failed):
    job = _job(tmp_path)
    packager = ModelArchive()
    path = packager.build(job)
    _rewritten(path, **change)
    checks = {c.name: c for c in packager.check(path, job)}
    assert checks[failed].status == "failed", checks
    assert all(c.status == "passed" for name, c in checks.items() if name != failed)
