"""What each check passed with, and the tested range of each framework and runtime derived from those checks.

    python -m tools.versions record NAME --passed|--failed [--note TEXT]
        writes compat/NAME.json: the versions of every package the registry declares, as installed in this Python
        (run it with the Python of the environment that was checked)
    python -m tools.versions ranges
        writes convert/tested_versions.json: for each package, the lowest and the highest version among the checks that
        passed (compat/*.json), and the table of them in docs/known-issues.md

``make lock`` records ``lock`` after the whole suite passed on the locked set; ``make test-latest`` records ``latest``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from importlib import metadata
from pathlib import Path

from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
CHECKS = REPO / "compat"
TESTED_FILE = REPO / "convert" / "tested_versions.json"
VERSIONS_PAGE = REPO / "docs" / "known-issues.md"
TABLE_MARK = "<!-- tested-versions -->"  # the table in docs/known-issues.md lies between two of these


def installed_versions() -> dict[str, dict[str, str]]:
    """Import name → {distribution, version} of every registered package installed in this Python."""
    from convert.compat import package_version
    from convert.registry import REGISTRY

    providers = metadata.packages_distributions()
    found = {}
    for name in (*REGISTRY.packages(), *REGISTRY.loading_packages()):
        version = package_version(name)
        if version == "-":
            continue
        distribution = next((d for d in providers.get(name, []) if metadata.version(d) == version), name)
        found[name] = {"distribution": distribution.lower().replace("_", "-"), "version": version}
    return found


def record(name: str, passed: bool, note: str) -> Path:
    CHECKS.mkdir(exist_ok=True)
    path = CHECKS / f"{name}.json"
    check = {
        "check": name,
        "date": datetime.date.today().isoformat(),
        "python": sys.version.split()[0],
        "passed": passed,
        "note": note,
        "packages": installed_versions(),
    }
    path.write_text(json.dumps(check, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return path


def tested_ranges(checks: list[dict]) -> dict[str, dict[str, str]]:
    """For each package: the lowest and highest version among the checks that passed (a local build label such as
    +cpu is dropped: the range is of releases)."""
    ranges: dict[str, dict[str, str]] = {}
    for check in checks:
        if not check["passed"]:
            continue
        for name, package in check["packages"].items():
            release = Version(package["version"]).public
            entry = ranges.setdefault(name, {"distribution": package["distribution"], "low": release, "high": release})
            if Version(release) < Version(entry["low"]):
                entry["low"] = release
            if Version(release) > Version(entry["high"]):
                entry["high"] = release
    return dict(sorted(ranges.items()))


def recorded_checks() -> list[dict]:
    return [json.loads(path.read_text(encoding="utf-8")) for path in sorted(CHECKS.glob("*.json"))]


def ranges_document(checks: list[dict]) -> dict:
    return {"checks": sorted(c["check"] for c in checks if c["passed"]), "packages": tested_ranges(checks)}


def readme_table(document: dict) -> str:
    rows = [
        f"| {p['distribution']} | {p['low']} | {p['high']} |"
        for p in sorted(document["packages"].values(), key=lambda p: p["distribution"])
    ]
    return "\n".join(["| package | lowest tested | highest tested |", "|---|---|---|", *rows])


def write_ranges() -> None:
    document = ranges_document(recorded_checks())
    TESTED_FILE.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    before, _, rest = VERSIONS_PAGE.read_text(encoding="utf-8").partition(TABLE_MARK)
    _, _, after = rest.partition(TABLE_MARK)
    VERSIONS_PAGE.write_text(f"{before}{TABLE_MARK}\n{readme_table(document)}\n{TABLE_MARK}{after}", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.versions", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    recording = commands.add_parser("record", help="record the versions of this Python's packages as check NAME")
    recording.add_argument("name")
    outcome = recording.add_mutually_exclusive_group(required=True)
    outcome.add_argument("--passed", action="store_true")
    outcome.add_argument("--failed", action="store_true")
    recording.add_argument("--note", default="")
    commands.add_parser("ranges", help="write convert/tested_versions.json from the recorded checks")
    args = parser.parse_args(argv)
    if args.command == "record":
        print(f"recorded {record(args.name, args.passed, args.note).relative_to(REPO)}")
    else:
        write_ranges()
        print(f"wrote {TESTED_FILE.relative_to(REPO)} and the table in {VERSIONS_PAGE.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
