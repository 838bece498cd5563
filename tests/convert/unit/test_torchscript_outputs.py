"""The flat outputs of a traced TorchScript and the names its archive stores for them (convert/backends/torch.py), as
the TorchScript exporter, its runtime and the Triton packager use them."""

from __future__ import annotations

import json
import zipfile

import pytest
import torch

from convert.backends.torch import SCRIPT_OUTPUT_NAMES, flattening_hook, load_script, save_script, script_outputs


class NamedOutputs(torch.nn.Module):
    """Returns a dict whose keys are out of alphabetical order, one of them nested, and a None the exporters drop."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.project = torch.nn.Linear(4, 3)

    def forward(self, x):
        return {"scores": self.project(x), "extra": None, "hidden": {"first": x * 2, "last": x + 1}}


def _traced(module, names: list[str]):
    flattening = module.register_forward_hook(flattening_hook(names))
    try:
        return torch.jit.trace(module, (torch.ones(2, 4),), strict=False, check_trace=False)
    finally:
        flattening.remove()


def test_a_dict_returning_module_is_traced_returning_a_flat_tuple_named_in_its_archive(tmp_path):
    module, names = NamedOutputs().eval(), []
    traced = _traced(module, names)
    assert names == ["scores", "hidden.first", "hidden.last"]
    assert str(traced.forward.schema.returns[0].type) == "Tuple[Tensor, Tensor, Tensor]"
    assert [name for name, _ in traced.named_modules()] == ["", "project"]  # the source's paths
    assert not module._forward_hooks and "forward" not in vars(module)  # the source is left as it was
    save_script(traced, tmp_path / "model.pt", names)
    loaded, stored = load_script(tmp_path / "model.pt")
    assert stored == names
    x = torch.randn(5, 4)  # another batch than the trace's
    outputs = script_outputs(loaded(x), stored)
    expected = module(x)
    torch.testing.assert_close(outputs["scores"], expected["scores"])
    torch.testing.assert_close(outputs["hidden.last"], expected["hidden"]["last"])
    with zipfile.ZipFile(tmp_path / "model.pt") as archive:  # where the Triton packager reads it without running the code
        member = next(n for n in archive.namelist() if n.endswith(f"/extra/{SCRIPT_OUTPUT_NAMES}"))
        assert json.loads(archive.read(member)) == names


def test_a_single_output_is_returned_alone_under_its_own_name(tmp_path):
    class OneLogit(torch.nn.Module):
        def forward(self, x):
            return {"logits": x.sum(-1)}

    names = []
    traced = _traced(OneLogit(), names)
    assert names == ["logits"] and str(traced.forward.schema.returns[0].type) == "Tensor"
    assert list(script_outputs(traced(torch.ones(3, 4)), names)) == ["logits"]


def test_the_module_s_own_forward_hooks_run_before_the_outputs_are_flattened():
    module, names = NamedOutputs().eval(), []
    module.register_forward_hook(lambda m, args, out: {**out, "scores": out["scores"] * 0})
    traced = _traced(module, names)
    assert torch.count_nonzero(script_outputs(traced(torch.ones(2, 4)), names)["scores"]) == 0


def test_an_archive_without_stored_names_is_named_as_its_outputs_are(tmp_path):
    """A TorchScript this tool did not trace (a user's scripted module, saved as it is) returns what it returns."""

    class Pair(torch.nn.Module):
        def forward(self, x):
            return {"scores": x * 2, "hidden": x + 1}

    traced = torch.jit.trace(Pair(), (torch.ones(2, 4),), strict=False, check_trace=False)
    save_script(traced, tmp_path / "model.pt")
    loaded, stored = load_script(tmp_path / "model.pt")
    assert stored is None
    assert list(script_outputs(loaded(torch.ones(2, 4)), stored)) == ["scores", "hidden"]


def test_names_that_do_not_count_the_returned_tensors_are_an_error():
    with pytest.raises(ValueError, match="returns 2 outputs where its archive names 3"):
        script_outputs((torch.ones(1), torch.ones(1)), ["a", "b", "c"])
