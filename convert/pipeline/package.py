"""The package stage: one --package packager over the run's validated artifacts of the formats it takes. The package
holds their bytes, checked against the digests their checks were made on, and passes its own structural checks; it
is published beside them, or in the failed folder."""

from __future__ import annotations

from convert.pipeline.context import RunContext
from convert.registry import REGISTRY
from convert.reports import model as rm
from convert.safety import FAILED_FOLDER, sha256_files, size_of


def package(ctx: RunContext, name: str) -> None:
    from convert.packagers.base import PackageJob, PackedArtifact

    spec = REGISTRY.get("packager", name)
    record = rm.PackageRecord(packager=name)
    ctx.report.packages.append(record)
    with ctx.stages.run("package", name) as stage:
        packed = [r for r in ctx.report.artifacts if r.passed and not r.candidate and r.key in ctx.artifacts and spec.packs(r.format)]
        if not packed:
            stage.status, stage.reason = "skipped", f"no artifact of the formats it takes ({', '.join(spec.takes)}) passed validation"
            return
        members = []
        for r in packed:
            artifact = ctx.artifacts[r.key]
            members.append(PackedArtifact(r.key, r.format, r.precision, artifact.path, tuple(artifact.files), r.sha256 or ""))
            record.artifacts.append(rm.PackedArtifactRecord(key=r.key, format=r.format, sha256=r.sha256 or "", passed=r.passed))
        job = PackageJob(folder=ctx.staging.path, stem=ctx.stem, artifacts=tuple(members), report=ctx.report)
        packager = spec.load()()
        path = packager.build(job)
        record.checks = packager.check(path, job)
        record.sha256, record.size_bytes = sha256_files([path]), size_of([path])
        record.passed = all(a.passed for a in record.artifacts) and all(c.status == "passed" for c in record.checks)
        folder, other = (ctx.out_dir, ctx.out_dir / FAILED_FOLDER) if record.passed else (ctx.out_dir / FAILED_FOLDER, ctx.out_dir)
        ctx.staging.publish([path], folder, other)
        record.path = str(folder / path.name)
