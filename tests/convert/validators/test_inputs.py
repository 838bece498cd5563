import numpy as np

from convert.specs import parse_input_specs
from convert.validators import generate_feed, plan_shape_cases


def test_generated_values_respect_domains_and_dtypes():
    specs = parse_input_specs(["ids:int64[B,S]{0..30521}", "mask:int64[B,S]{0..1}", "x:float32[B,4]{-2..2}", "flag:bool[B]"])
    feed = generate_feed(specs, {"B": 4, "S": 64}, sample=0)
    assert feed["ids"].dtype == np.int64 and feed["ids"].min() >= 0 and feed["ids"].max() <= 30521
    assert set(np.unique(feed["mask"])) <= {0, 1}
    assert feed["x"].dtype == np.float32 and feed["x"].min() >= -2 and feed["x"].max() < 2
    assert feed["flag"].dtype == np.bool_
    assert feed["ids"].shape == (4, 64)


def test_generation_is_seeded_and_samples_differ():
    specs = parse_input_specs(["x:float32[B,3]"])
    a = generate_feed(specs, {"B": 2}, sample=0, seed=7)
    b = generate_feed(specs, {"B": 2}, sample=0, seed=7)
    c = generate_feed(specs, {"B": 2}, sample=1, seed=7)
    assert np.array_equal(a["x"], b["x"])
    assert not np.array_equal(a["x"], c["x"])


def test_every_symbol_gets_two_sizes_including_non_export_ones():
    cases = plan_shape_cases(("B", "S"))
    assert cases[0].label == "export"
    for symbol in ("B", "S"):
        sizes = {c.sizes[symbol] for c in cases}
        assert len(sizes) >= 2
        assert sizes - {cases[0].sizes[symbol]}


def test_dim_choice_and_ranges_are_respected():
    cases = plan_shape_cases(("B",), chosen={"B": (4, 1, 16)})
    assert [c.sizes["B"] for c in cases] == [4, 1, 16]
    bounded = plan_shape_cases(("S",), ranges={"S": (2, 6)})
    assert all(2 <= c.sizes["S"] <= 6 for c in bounded) and len(bounded) >= 2


def test_no_symbols_means_one_static_case():
    assert [c.describe() for c in plan_shape_cases(())] == ["static"]


def test_a_padding_mask_is_ones_then_zeros_with_no_row_fully_masked():
    specs = parse_input_specs(["attention_mask:int64[B,S]{0..1}", "padding_mask:bool[B,S]", "keep_mask:int64[B,S]{1..1}"])
    for sample in range(5):
        feed = generate_feed(specs, {"B": 6, "S": 9}, sample)
        for name in ("attention_mask", "padding_mask"):
            mask = feed[name].astype(int)
            assert mask[0].all() and (mask.sum(axis=1) >= 1).all(), mask
            assert (np.diff(mask, axis=1) <= 0).all(), mask  # never a 1 after a 0
        assert feed["keep_mask"].all()
    assert generate_feed(specs, {"B": 6, "S": 9}, 0)["padding_mask"].dtype == bool
