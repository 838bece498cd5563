"""Symbols take distinct export sizes and move independently: an artifact right only when two dims are equal fails."""

import numpy as np

from convert.validators import plan_shape_cases


def test_symbols_take_distinct_default_export_sizes():
    for count in range(2, 9):
        symbols = tuple(f"D{i}" for i in range(count))
        export = plan_shape_cases(symbols)[0]
        assert export.label == "export"
        assert len(set(export.sizes.values())) == count, export.sizes


def test_a_sequence_is_exported_far_from_the_batch():
    export = plan_shape_cases(("B", "S"))[0].sizes
    assert export["B"] >= 2 and export["S"] >= 2 * export["B"] + 1


def test_each_symbol_moves_to_its_max_while_the_others_stay_at_their_min():
    cases = plan_shape_cases(("B", "S", "H"))
    sizes = {symbol: sorted({c.sizes[symbol] for c in cases}) for symbol in ("B", "S", "H")}
    for symbol in ("B", "S", "H"):
        others = [s for s in sizes if s != symbol]
        assert any(c.sizes[symbol] == sizes[symbol][-1] and all(c.sizes[o] == sizes[o][0] for o in others) for c in cases)
        assert any(c.sizes[symbol] == sizes[symbol][0] and any(c.sizes[o] == sizes[o][-1] for o in others) for c in cases)
    assert any(all(c.sizes[s] == sizes[s][0] for s in sizes) for c in cases)  # every symbol at its min at once


def test_no_two_symbols_move_in_lockstep():
    """Across the cases, no symbol's sizes are a function of another's: a graph that tied them would fail somewhere."""
    cases = plan_shape_cases(("B", "S"))
    assert any(c.sizes["B"] < c.sizes["S"] for c in cases) and any(c.sizes["B"] > c.sizes["S"] for c in cases)


def test_the_case_count_stays_small():
    assert len(plan_shape_cases(("B",))) == 3
    assert len(plan_shape_cases(("B", "S"))) == 4
    assert len(plan_shape_cases(("B", "S", "H"))) == 5


def test_an_artifact_that_swaps_two_dims_is_caught_where_the_lockstep_plan_missed_it():
    """A graph that reads the batch where it should read the sequence (an export that tied B and S) gives the
    reference's values whenever B == S, the only sizes the lockstep plan tried."""

    def reference(x):  # x: [B, S] → [B, S]
        return np.cumsum(x, axis=1)

    def tied(x):  # reshapes with the batch size on both axes, as a graph that tied S to B would
        return np.cumsum(x.reshape(x.shape[0], x.shape[0]), axis=1)

    def agrees(sizes):
        x = np.arange(sizes["B"] * sizes["S"], dtype=np.float32).reshape(sizes["B"], sizes["S"])
        try:
            return np.array_equal(reference(x), tied(x))
        except ValueError:
            return False

    lockstep = [{"B": b, "S": b} for b in (2, 1, 5)]
    assert all(agrees(sizes) for sizes in lockstep)
    assert not all(agrees(c.sizes) for c in plan_shape_cases(("B", "S")))


def test_export_sizes_from_example_inputs_are_kept_and_a_default_avoids_them():
    export = plan_shape_cases(("B", "S"), export_sizes={"S": 2})[0].sizes
    assert export["S"] == 2 and export["B"] != 2


def test_dim_choices_are_each_validated_and_ranges_bound_every_case():
    cases = plan_shape_cases(("B", "S"), chosen={"B": (4, 1, 16, 8)}, ranges={"S": (3, 9)})
    assert cases[0].sizes["B"] == 4
    assert {c.sizes["B"] for c in cases} == {4, 1, 16, 8}
    s_sizes = {c.sizes["S"] for c in cases}
    assert all(3 <= size <= 9 for size in s_sizes) and len(s_sizes) >= 2
    assert {c.sizes["S"] for c in cases if c.sizes["B"] == 16} == {min(s_sizes)}  # B at its max, S at its min
    assert len({tuple(c.sizes.items()) for c in cases}) == len(cases)
