"""A fake artifact format, registered from outside the package through $CONVERT_PLUGINS: a test of how far one
registration reaches (CLI choices, plan, cache key, report, doctor, renderings), named as a fake.

A ``fakeonnx`` artifact is an ONNX model behind a five-byte header. Its exporter takes an ONNX source, its runtime strips
the header and runs ONNX Runtime on the CPU, and its packager writes a tar of the validated artifacts whose structural
check reads each one's bytes back against its validated digest (with $FAKE_BUNDLE_CORRUPT set, it packs other bytes:
a package that must fail its check). Nothing else in the tool is edited for it."""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
from pathlib import Path

from convert.artifacts import Artifact
from convert.exporters.base import Exporter, ExportJob
from convert.formats import RUN_ONLY_FACTS
from convert.packagers.base import PackageJob, Packager
from convert.registry import CORE_EXTRA, REGISTRY, ExporterSpec, FormatSpec, PackagerSpec, RuntimeSpec
from convert.reports import model as rm
from convert.runtimes.onnxruntime import OnnxRuntimeRunner

HEADER = b"FAKE\n"

REGISTRY.add(
    FormatSpec(
        name="fakeonnx",
        title="a fake ONNX model",
        suffix=".fake",
        given_suffixes=(".fake",),
        **RUN_ONLY_FACTS,
    )
)
REGISTRY.add(
    ExporterSpec(name="onnx-fake", target=f"{__name__}:FakeExporter", format="fakeonnx", sources=("onnx",), packages=(), extra=CORE_EXTRA)
)
REGISTRY.add(RuntimeSpec(name="fake-runtime", target=f"{__name__}:FakeRunner", formats=("fakeonnx",), packages=(), extra=CORE_EXTRA))
REGISTRY.add(
    PackagerSpec(
        name="fake-bundle", target=f"{__name__}:FakeBundle", takes=("fakeonnx",), suffix=".bundle.tar", packages=(), extra=CORE_EXTRA
    )
)


class FakeExporter(Exporter):
    def strategies(self, job: ExportJob):
        return [("the ONNX bytes behind a header", lambda path: self._write(job, path))]

    def _write(self, job: ExportJob, path: Path) -> Artifact:
        import onnx

        model = onnx.load(str(job.source.native))
        path.write_bytes(HEADER + model.SerializeToString())
        return Artifact(format=self.format, path=path, files=[path], output_names=tuple(o.name for o in model.graph.output))


class FakeRunner(OnnxRuntimeRunner):
    cpu_only = "the fake runtime runs on the CPU only"

    def activate(self) -> None:
        import onnxruntime

        data = self.path.read_bytes()
        if not data.startswith(HEADER):
            raise RuntimeError(f"{self.path} is not a fake artifact")
        self.session = onnxruntime.InferenceSession(data[len(HEADER) :], providers=["CPUExecutionProvider"])
        self.output_names = [o.name for o in self.session.get_outputs()]


class FakeBundle(Packager):
    def build(self, job: PackageJob) -> Path:
        path = self.package_path(job.folder, job.stem)
        with tarfile.open(path, "w") as bundle:
            for artifact in job.artifacts:
                name = f"{artifact.key}/{artifact.path.name}"
                if os.environ.get("FAKE_BUNDLE_CORRUPT"):
                    data = artifact.path.read_bytes()[:-1]
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    bundle.addfile(info, io.BytesIO(data))
                else:
                    bundle.add(artifact.path, arcname=name)
        return path

    def check(self, path: Path, job: PackageJob) -> list[rm.PackageCheck]:
        checks = []
        with tarfile.open(path) as bundle:
            for artifact in job.artifacts:
                data = bundle.extractfile(f"{artifact.key}/{artifact.path.name}").read()
                held = hashlib.sha256(data).hexdigest() == artifact.sha256
                checks.append(rm.PackageCheck(name=f"digest:{artifact.key}", status="passed" if held else "failed"))
        return checks
