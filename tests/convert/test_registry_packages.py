"""A format's packages are declared once, on its registry entry: the environment record, the cache's version keys and
`convert doctor` all read them from there."""

from __future__ import annotations

import functools
from importlib import metadata

import pytest

from convert import compat, doctor
from convert.pipeline.runner import environment
from convert.registry import CORE_PACKAGES, KINDS, REGISTRY, ExporterSpec


@pytest.fixture
def fake_exporter(monkeypatch):
    """A fake exporter entry (never loaded) that declares a package no other entry does: psutil, installed here."""
    REGISTRY._ensure_loaded()  # the real entries first: patched in, they would be lost when the patch is undone
    entries = dict(REGISTRY._entries)
    entries[("exporter", "fake-psutil")] = ExporterSpec(
        name="fake-psutil", target="nowhere:Nothing", format="onnx", sources=("torch",), packages=("psutil",), extra="fake"
    )
    monkeypatch.setattr(REGISTRY, "_entries", entries)
    return entries[("exporter", "fake-psutil")]


def test_a_package_declared_on_an_entry_is_recorded_cache_keyed_and_listed_by_doctor(fake_exporter):
    assert "psutil" in environment().packages
    assert "psutil" in REGISTRY.source_packages("torch") and "psutil" not in REGISTRY.source_packages("keras")
    row = next(r for r in doctor.package_rows() if r.name == "psutil")
    assert row.status == "installed" and REGISTRY.extra_of("psutil") == "fake"


def test_every_entry_that_needs_more_than_the_core_names_its_packages_and_extra():
    for kind in KINDS:
        for entry in REGISTRY.entries(kind):
            assert entry.all_packages[: len(CORE_PACKAGES)] == CORE_PACKAGES
            if entry.packages:
                assert entry.extra, f"{kind} {entry.name} declares packages but not the extra that installs them"
            assert set(getattr(entry, "requires", ())) <= set(entry.packages), f"{kind} {entry.name} requires undeclared packages"


def test_a_missing_package_is_listed_with_the_extra_that_installs_it(monkeypatch):
    monkeypatch.setattr(doctor, "package_version", lambda name: "-" if name == "onnxslim" else "1.0")
    row = next(r for r in doctor.package_rows() if r.name == "onnxslim")
    assert (row.status, row.detail) == ("missing", "pip install 'model-convert[optimize]'")


def test_a_package_is_versioned_by_the_distribution_that_provides_it_whatever_its_name(tmp_path, monkeypatch):
    """As tensorflow-cpu provides tensorflow: a distribution that declares the package (top_level.txt), or one whose
    files hold it; a package that nothing provides and nothing can import is missing."""
    for package, distribution, listing, text in (
        ("declared_package", "declaring-distribution", "top_level.txt", "declared_package\n"),
        ("listed_package", "listing-distribution", "RECORD", "listed_package/__init__.py,,\n"),
    ):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
        info = tmp_path / f"{distribution.replace('-', '_')}-1.2.3.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 1.2.3\n")
        (info / listing).write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    # each read once per process: fresh ones, that see this test's distributions
    monkeypatch.setattr(compat, "_distributions", functools.cache(metadata.packages_distributions))
    monkeypatch.setattr(compat, "package_version", functools.cache(compat.package_version.__wrapped__))
    assert compat.package_version("declared_package") == compat.package_version("listed_package") == "1.2.3"
    assert compat.package_version("no_such_package_here") == "-"
