"""The forward parameter that takes transformers' key/value cache, read from its annotation whatever its name: fakes of
forwards (their annotations strings, as ``from __future__ import annotations`` leaves them; no framework imported)
with the cache under names transformers never used, typed as transformers 5 types it (a Cache) and as transformers 4
typed some (tensors per layer)."""

# ruff: noqa: F821 (the fakes' annotations name transformers' and torch's types, strings never evaluated)
from __future__ import annotations

from convert.backends.huggingface import DECODER_ARGUMENTS, SEQ2SEQ_ARGUMENTS, cache_parameter


def fake_decoder_forward(
    input_ids: torch.LongTensor | None = None,
    attention_mask: torch.Tensor | None = None,
    kv_state: Cache | None = None,
    cache_position: torch.LongTensor | None = None,
    use_cache: bool | None = None,
    **kwargs,
): ...


def fake_seq2seq_forward_of_transformers_4(
    input_ids: Optional[torch.LongTensor] = None,
    decoder_input_ids: Optional[torch.LongTensor] = None,
    encoder_outputs: Optional[tuple[tuple[torch.FloatTensor]]] = None,
    memory: Optional[tuple[tuple[torch.FloatTensor]]] = None,
    use_cache: Optional[bool] = None,
): ...


def fake_forward_of_both_types(
    states: Union[Cache, tuple[tuple[torch.Tensor, torch.Tensor], ...], None] = None, encoder_outputs: tuple[torch.Tensor] | None = None
): ...


def fake_hybrid_forward(input_ids: torch.LongTensor, layers_state: Optional[HybridMambaAttentionDynamicCache] = None): ...


def fake_forward_of_a_list_per_layer(input_ids: torch.LongTensor, pasts: list[torch.FloatTensor] | None = None): ...


def fake_forward_with_an_unannotated_past(input_ids, past_key_values=None, cache=None, use_cache=None): ...


def fake_forward_of_a_dict_cache(input_ids: torch.Tensor, cache: dict[str, torch.Tensor] | None = None): ...


def fake_forward_of_two_caches(input_ids: torch.Tensor, cache: Cache | None = None, encoder_cache: Cache | None = None): ...


def test_the_cache_is_the_parameter_typed_as_a_cache_whatever_its_name():
    assert cache_parameter(fake_decoder_forward, DECODER_ARGUMENTS) == "kv_state"
    assert cache_parameter(fake_hybrid_forward, DECODER_ARGUMENTS) == "layers_state"
    # a Cache before the tensors per layer that the same annotation allows, and before other tensors per layer
    assert cache_parameter(fake_forward_of_both_types, SEQ2SEQ_ARGUMENTS) == "states"


def test_a_forward_older_than_the_cache_type_gives_the_parameter_typed_as_tensors_per_layer():
    assert cache_parameter(fake_seq2seq_forward_of_transformers_4, SEQ2SEQ_ARGUMENTS) == "memory"
    assert cache_parameter(fake_forward_of_a_list_per_layer, DECODER_ARGUMENTS) == "pasts"
    # the encoder's outputs are typed as tensors per layer too: only the caller, who fills them, tells them apart
    assert cache_parameter(fake_seq2seq_forward_of_transformers_4) is None


def test_a_name_alone_or_a_type_that_is_no_key_value_cache_gives_none():
    assert cache_parameter(fake_forward_with_an_unannotated_past, DECODER_ARGUMENTS) is None
    assert cache_parameter(fake_forward_of_a_dict_cache, DECODER_ARGUMENTS) is None
    assert cache_parameter(fake_forward_of_two_caches, DECODER_ARGUMENTS) is None  # which one is no guess
