"""Mixture-of-experts layers of transformers models, computed densely so that they export.

transformers runs a model's experts (the modules its ``use_experts_implementation`` decorator marks, the routed experts of
Mixtral, Qwen2-MoE, Qwen3-MoE and most MoE decoders) through the implementation the config names, by default
``grouped_mm``: tokens sorted by expert, counted with ``histc``, each expert applied to its own tokens. The number of
tokens an expert receives depends on the values, which torch.export and the ONNX exporter cannot capture. The dense
implementation registered here computes the same numbers with shapes that depend only on the input's: every expert
runs on every token, and its output is weighted by the router's weight for that token, zero where the router did not
select it. The router (softmax, top-k, normalisation) and any shared expert are the model's own and unchanged, and so
are the weights; the cost is ``num_experts / top_k`` times the experts' arithmetic.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

DENSE = "dense"  # the name of the implementation in transformers' experts interface


def dense_experts_forward(experts: Any, hidden_states: Any, top_k_index: Any, top_k_weights: Any) -> Any:
    """The experts' output for ``hidden_states`` [tokens, hidden] routed to ``top_k_index`` with ``top_k_weights``
    [tokens, top_k]: every expert applied to every token ([experts, tokens, ...], the experts as the batch of one
    matmul), summed with the router's weights scattered into a dense [tokens, experts] matrix."""
    import torch

    routing = torch.zeros(hidden_states.size(0), experts.num_experts, dtype=top_k_weights.dtype, device=top_k_weights.device).scatter(
        1, top_k_index, top_k_weights
    )
    up = experts.gate_up_proj if experts.has_gate else experts.up_proj
    projected = torch.matmul(hidden_states.unsqueeze(0), up if experts.is_transposed else up.transpose(1, 2))
    if experts.has_bias:
        projected = projected + (experts.gate_up_proj_bias if experts.has_gate else experts.up_proj_bias).unsqueeze(1)
    projected = experts._apply_gate(projected) if experts.has_gate else experts.act_fn(projected)
    down = experts.down_proj if experts.is_transposed else experts.down_proj.transpose(1, 2)
    out = torch.matmul(projected, down)  # [experts, tokens, hidden]
    if experts.has_bias:
        out = out + experts.down_proj_bias.unsqueeze(1)
    if experts.has_post_expert_norm:
        out = experts.post_expert_norm(out)
    weighted = out * routing.transpose(0, 1).unsqueeze(-1)  # promoted to the router's dtype, as the library does
    return weighted.sum(dim=0).to(hidden_states.dtype)


def experts_modules(model: Any) -> list[Any]:
    """The modules of ``model`` whose forward transformers dispatches by the config's experts implementation."""
    return [m for m in model.modules() if hasattr(m, "has_gate") and hasattr(type(m), "_apply_gate")]


@contextlib.contextmanager
def dense_experts(model: Any) -> Iterator[str | None]:
    """``model``'s experts computed by :func:`dense_experts_forward` inside the block, and by the implementation they
    had before after it; yields what :func:`use_dense_experts` returns."""
    before = model.get_experts_implementation() if experts_modules(model) else None
    try:
        yield use_dense_experts(model)
    finally:
        if before is not None:
            model.set_experts_implementation(before)


def use_dense_experts(model: Any) -> str | None:
    """Compute ``model``'s experts densely from now on; a sentence saying so for the source's description, or None
    where the model has no experts modules that transformers lets it switch (none before transformers 5, which has no
    experts interface to import)."""
    if not experts_modules(model):
        return None
    from transformers.integrations.moe import ExpertsInterface

    ExpertsInterface.register(DENSE, dense_experts_forward)
    model.set_experts_implementation(DENSE)
    switched = [m for m in experts_modules(model) if m.config._experts_implementation == DENSE]
    if not switched:
        return None
    return (
        f"its {len(switched)} mixture-of-experts layers computed densely (every expert on every token, weighted by the "
        "router, zero where it did not select the expert): the same numbers, with shapes that export"
    )
