"""The chain's link figures: one link measured from its two ends' outputs, and how the report says them."""

from __future__ import annotations

import numpy as np

from convert.checks.chain import link
from convert.reports import model as rm
from convert.validators import TolerancePolicy

FEED = {"x": np.zeros((2, 3), np.float32)}


def _measured(expected: dict, actual: dict, precision: str = "fp32") -> rm.ChainLink:
    return link("conversion", "a strategy", "the program against the artifact", expected, actual, FEED, TolerancePolicy(), precision)


def test_a_link_whose_ends_agree_is_within_tolerance_with_its_error():
    out = np.linspace(-1, 1, 12, dtype=np.float32).reshape(2, 6)
    measured = _measured({"y": out}, {"y": out + np.float32(1e-6)})
    assert measured.status == "measured" and measured.within_tolerance
    assert abs(measured.max_abs_error - 1e-6) < 1e-7
    assert measured.worst_output == "y" and measured.cosine_similarity > 0.999999


def test_the_worst_output_is_named_and_a_link_beyond_its_ends_tolerance_is_out():
    a, b = np.ones((2, 4), np.float32), np.full((2, 4), 2.0, np.float32)
    measured = _measured({"a": a, "b": b}, {"a": a, "b": b * np.float32(1.1)})
    assert not measured.within_tolerance and measured.worst_output == "b"
    assert abs(measured.max_abs_error - 0.2) < 1e-6
    # judged with the tolerance of the link's end: 10% off misses an FP16 artifact's default budget too
    assert not _measured({"b": b}, {"b": b * np.float32(1.1)}, "fp16").within_tolerance


def test_an_output_missing_at_one_end_is_said_and_out_of_tolerance():
    measured = _measured({"y": np.ones(3, np.float32), "z": np.ones(3, np.float32)}, {"y": np.ones(3, np.float32)})
    assert not measured.within_tolerance and "missing" in measured.reason and measured.max_abs_error == 0.0


def test_the_sentence_names_each_link_and_only_a_link_out_of_tolerance_makes_it_notable():
    def made(kind, step, error, within):
        return rm.ChainLink(link=kind, step=step, compares="", status="measured", max_abs_error=error, within_tolerance=within)

    chain = rm.ChainLinks(shape="B=2", links=[made("capture", "s", 0.0, True), made("conversion", "s", 1.2e-7, True)])
    assert chain.describe() == "max abs error each link adds, at B=2: capture 0, conversion 1.2e-07" and not chain.notable()
    chain.links.append(made("optimization", "int8", 0.25, False))
    chain.links.insert(0, rm.ChainLink(link="capture", step="s", compares="", status="skipped", reason="no program"))
    assert chain.describe().endswith("capture not measured (no program), capture 0, conversion 1.2e-07, int8 0.25 (out of tolerance)")
    assert chain.notable()
    record = rm.ArtifactRecord(format="onnx", details=[chain])
    assert rm.ArtifactRecord.model_validate_json(record.model_dump_json()).detail(rm.ChainLinks) == chain
