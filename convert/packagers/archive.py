"""A model-registry archive: one zip holding the validated artifacts, each under its key, and a manifest naming each
artifact's format, precision, files and the digest its checks were made on, with the source and the tool's version.

Its checks read the archive back: it passes the tool's own archive checks (no member outside it, no decompression bomb),
its manifest parses and names exactly its members, and each artifact's bytes in it have the validated digest."""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

from convert.errors import ConvertError
from convert.packagers.base import PackageJob, Packager
from convert.reports import model as rm
from convert.safety import combine_digests, named_files

MANIFEST = "manifest.json"
MANIFEST_VERSION = 1


class ModelArchive(Packager):
    def build(self, job: PackageJob) -> Path:
        path = self.package_path(job.folder, job.stem)
        entries = []
        with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
            for artifact in job.artifacts:
                members = []
                for name, file in named_files(list(artifact.files)):
                    member = f"{artifact.key}/{_under(artifact, file)}"
                    archive.write(file, member)
                    members.append({"member": member, "name": name})
                entries.append(
                    {
                        "key": artifact.key,
                        "format": artifact.format,
                        "precision": artifact.precision,
                        "path": f"{artifact.key}/{artifact.path.name}",
                        "sha256": artifact.sha256,
                        "single_file": len(artifact.files) == 1 and artifact.files[0].is_file(),
                        "members": members,
                    }
                )
            source = job.report.source
            manifest = {
                "manifest_version": MANIFEST_VERSION,
                "tool_version": job.report.tool_version,
                "report_schema": job.report.schema_version,
                "source": {"framework": source.framework, "path": source.path, "sha256": source.sha256},
                "artifacts": entries,
            }
            archive.writestr(MANIFEST, json.dumps(manifest, indent=2))
        return path

    def check(self, path: Path, job: PackageJob) -> list[rm.PackageCheck]:
        from convert.archives import check_archive
        from convert.readers import loads_json

        try:
            infos = check_archive(path)
        except ConvertError as exc:
            return [rm.PackageCheck(name="archive", status="failed", reason=exc.paragraph())]
        checks = [rm.PackageCheck(name="archive", status="passed", reason=f"{len(infos)} members, none outside it")]
        with zipfile.ZipFile(path) as archive:
            try:
                manifest = loads_json(archive.read(MANIFEST).decode(), MANIFEST, "")
            except (KeyError, ConvertError, UnicodeDecodeError) as exc:
                return [*checks, rm.PackageCheck(name="manifest", status="failed", reason=f"unreadable: {exc}")]
            listed = {MANIFEST, *(m["member"] for entry in manifest["artifacts"] for m in entry["members"])}
            present = {info.filename for info in infos}
            checks.append(
                rm.PackageCheck(
                    name="manifest",
                    status="passed" if listed == present else "failed",
                    reason="names every member and no other"
                    if listed == present
                    else f"members not in the manifest: {sorted(present - listed)}; missing: {sorted(listed - present)}",
                )
            )
            by_key = {entry["key"]: entry for entry in manifest["artifacts"]}
            for artifact in job.artifacts:
                checks.append(_digest_check(archive, by_key.get(artifact.key), artifact.key, artifact.sha256, present))
        return checks


def _under(artifact, file: Path) -> str:
    """Where a file of the artifact goes under its key: its path relative to the artifact's folder (a folder artifact
    keeps its folder's name)."""
    return str(file.relative_to(artifact.path.parent))


def _digest_check(archive: zipfile.ZipFile, entry: dict | None, key: str, validated: str, present: set[str]) -> rm.PackageCheck:
    name = f"digest:{key}"
    if entry is None:
        return rm.PackageCheck(name=name, status="failed", reason="the manifest does not list it")
    missing = [m["member"] for m in entry["members"] if m["member"] not in present]
    if missing:
        return rm.PackageCheck(name=name, status="failed", reason=f"members missing: {missing}")
    digests = [(m["name"], _member_sha256(archive, m["member"])) for m in entry["members"]]
    packed = digests[0][1] if entry["single_file"] else combine_digests(digests)
    if packed != validated or entry["sha256"] != validated:
        return rm.PackageCheck(
            name=name, status="failed", reason=f"its bytes in the archive digest to {packed}, not the validated {validated}"
        )
    return rm.PackageCheck(name=name, status="passed", reason=f"the validated bytes (sha256 {validated[:12]}…): its checks hold for it")


def _member_sha256(archive: zipfile.ZipFile, member: str) -> str:
    digest = hashlib.sha256()
    with archive.open(member) as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
