"""Source adapters: one per framework. Each turns what the user gave into a SourceModel."""

from convert.registry import REGISTRY

REGISTRY.add("source", "torch", "convert.sources.torch:load_torch_source",
             extra="torch", module="torch", suffixes=(".pt", ".pth", ".pt2", ".ts", ".jit", ".bin"))
