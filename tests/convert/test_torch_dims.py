"""The dims the PyTorch exporters hand torch.export, and take back from it: a sum of symbols (P+S, a sliding-window
decoder's mask) is Dim.DYNAMIC, which has no name, and torch's suggested fixes are applied around it."""

from __future__ import annotations

import convert
from convert.exporters.base import ExportJob
from convert.exporters.torch_common import export_program
from convert.validators import generate_feed


def _windowed():
    import torch

    class Windowed(torch.nn.Module):
        """A position table of 16 rows bounds S (torch.export suggests S <= 16); the mask covers the past and the new
        positions (P+S)."""

        def __init__(self):
            super().__init__()
            self.table = torch.nn.Parameter(torch.randn(16, 4))

        def forward(self, x, past, mask):
            return torch.cat([past, x + self.table[: x.shape[1]]], dim=1) * mask.unsqueeze(-1)

    torch.manual_seed(0)
    return Windowed().eval()


def test_a_suggested_fix_is_applied_beside_a_sum_of_symbols(tmp_path):
    """torch 2.13's refine_dynamic_shapes_from_suggested_fixes failed on Dim.DYNAMIC with "'_DimHint' object has no
    attribute '__name__'"; the fix is applied, and the sum stays dynamic, derived from the trace."""
    import torch

    source = convert.load(_windowed(), inputs=["x:float32[B,S,4]", "past:float32[B,P,4]", "mask:float32[B,P+S]"])
    feed = generate_feed(source.signature.inputs, {"B": 2, "S": 5, "P": 3}, 0, 0)
    program, why = export_program(ExportJob(source, feed, tmp_path, "windowed"))
    assert why == "torch.export's suggested fix (S = Dim('S', max=16)), applied"
    mask = next(n for n in program.graph.nodes if n.op == "placeholder" and n.name == "mask").meta["val"]
    x = next(n for n in program.graph.nodes if n.op == "placeholder" and n.name == "x").meta["val"]
    past = next(n for n in program.graph.nodes if n.op == "placeholder" and n.name == "past").meta["val"]
    assert str(mask.shape[1]) == str(past.shape[1] + x.shape[1])  # P+S, not a size torch fixed
    module = program.module()
    shorter = [torch.randn(1, 2, 4), torch.randn(1, 6, 4), torch.ones(1, 8)]
    assert module(*shorter).shape == (1, 8, 4)
