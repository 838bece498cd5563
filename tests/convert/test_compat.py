"""The tested versions: the lock is what the suite runs on, the tested ranges are derived from the recorded checks, the
ranges pyproject.toml gives users are those ranges, and a version outside them is reported by doctor and in the report."""

from __future__ import annotations

import json
import re
import tomllib

from packaging.version import Version

from convert import compat, doctor
from convert.compat import TestedRange, outside_tested, tested_ranges
from tests.conftest import REPO, convert_command, load_report
from tools import versions

# a range that excludes every installed numpy: what doctor and the report show for a version outside the tested range
NARROW = "import convert.compat as c\nc.tested_ranges = lambda: {'numpy': c.TestedRange('numpy', '1.0.0', '1.0.1')}"


def test_the_tested_ranges_are_those_of_the_recorded_checks():
    recorded = json.loads(compat.TESTED_FILE.read_text())
    assert recorded == versions.ranges_document(versions.recorded_checks()), "stale: run python -m tools.versions ranges"
    assert "lock" in recorded["checks"]


def test_the_environment_the_suite_runs_in_is_the_lock_and_the_lock_is_a_check_that_passed():
    pins = {
        m[1].lower(): m[2] for line in (REPO / "requirements.lock").read_text().splitlines() if (m := re.match(r"^([\w.-]+)==(\S+)", line))
    }
    lock = json.loads((REPO / "compat" / "lock.json").read_text())
    assert lock["passed"]
    for name, package in lock["packages"].items():
        assert pins[package["distribution"]] == package["version"], f"{name}: compat/lock.json is not requirements.lock"
    installed = versions.installed_versions()
    differing = {name: (found["version"], pins.get(found["distribution"])) for name, found in installed.items()}
    differing = {name: pair for name, pair in differing.items() if pair[0] != pair[1]}
    assert not differing, f"installed versions that are not the lock's (make install): {differing}"
    assert outside_tested({name: found["version"] for name, found in installed.items()}) == {}


def test_pyproject_gives_users_the_tested_ranges():
    """Each ranged package's lower bound in pyproject.toml is the lowest version a check passed with, and an upper bound,
    where there is one, does not cut the range."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    requirements = [*project["dependencies"], *(r for extra in project["optional-dependencies"].values() for r in extra)]
    bounds = {}
    for requirement in requirements:
        match = re.match(r"^([A-Za-z0-9_.-]+)(.*)$", requirement)
        bounds.setdefault(match[1].lower(), []).append(match[2])
    for tested in tested_ranges().values():
        for specifier in bounds.get(tested.distribution, []):
            low = re.search(r">=([\w.]+)", specifier)
            assert low and low[1] == tested.low, f"{tested.distribution}{specifier}: the lowest version tested is {tested.low}"
            high = re.search(r"<([\w.]+)", specifier)
            assert not high or Version(high[1]) > Version(tested.high), f"{tested.distribution}{specifier} cuts {tested}"


def test_the_docs_table_is_the_tested_ranges():
    readme = (REPO / "docs" / "known-issues.md").read_text()
    table = readme.split("<!-- tested-versions -->")[1]
    for tested in tested_ranges().values():
        assert f"| {tested.distribution} | {tested.low} | {tested.high} |" in table, (
            f"docs/known-issues.md: run python -m tools.versions ranges ({tested})"
        )


def test_a_range_holds_the_releases_between_its_ends_whatever_their_build_label():
    tested = TestedRange("torch", "2.12.0", "2.13.0")
    assert tested.holds("2.13.0+cpu") and tested.holds("2.12.1") and not tested.holds("2.14.0") and not tested.holds("2.11.9")
    assert not tested.holds("not a version") and not tested.holds("2.12.0rc1") and tested.holds("2.13") and not tested.holds("2.13.1.dev0")


def test_doctor_says_which_installed_versions_are_outside_the_tested_range(monkeypatch):
    monkeypatch.setattr(compat, "tested_ranges", lambda: {"numpy": TestedRange("numpy", "1.0.0", "1.0.1")})
    rows = {row.name: row for row in doctor.package_rows()}
    assert rows["numpy"].status == "untested" and rows["numpy"].detail.startswith("outside the tested range (1.0.0 to 1.0.1)")
    assert rows["onnx"].status == "installed"
    assert rows["peft"].status in ("absent", "installed", "untested")  # listed whether or not it is installed


def test_a_run_outside_the_tested_range_says_so_in_the_report_and_on_the_console(torch_files, tmp_path):
    import subprocess

    out = tmp_path / "out"
    done = subprocess.run(
        convert_command(NARROW, str(torch_files / "cnn.pt2"), "--to", "onnx", "--out", str(out)),
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "PYTHONPATH": str(REPO), "COLUMNS": "200"},
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = load_report(out / "report.json")
    numpy = report["environment"]["packages"]["numpy"]
    assert report["environment"]["outside_tested"] == {"numpy": f"{numpy} (tested: 1.0.0 to 1.0.1)"}
    assert f"installed outside the tested versions: numpy {numpy} (tested: 1.0.0 to 1.0.1)" in done.stdout + done.stderr


def test_a_library_without_the_expected_api_is_named_with_its_version_and_tested_range():
    error = compat.library_mismatch("transformers", "its forward declares no cache argument")
    version = doctor.package_version("transformers")
    assert error.exit_code == 2
    assert f"transformers {version} does not have the API this tool expects: its forward declares no cache argument" in str(error)
    assert f"tested range of transformers ({tested_ranges()['transformers']})" in str(error)


def test_every_test_the_latest_check_runs_exists():
    """make test-latest (and the low-end checks, tools/latest.py) name tests by id: a renamed test must not leave the
    check failing on a name alone."""
    from tools.latest import TESTS

    for test in TESTS:
        path, _, name = test.partition("::")
        assert (REPO / path).exists(), test
        assert not name or f"def {name.split('[')[0]}(" in (REPO / path).read_text(), test
