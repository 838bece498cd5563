"""The with-past wrappers (a decoder's, an encoder-decoder's decoder and decoder_with_past components, an encoder-decoder
object's decoder) give the cache to the forward parameter its annotation types, whatever its name: each built on a
fake of the library's own forward that takes the cache under a name transformers never used and under no other
(``**kwargs`` absent, so a cache given by any other name is a TypeError), typed as a Cache or as tensors per layer (as
transformers 4 types GPT-2's), and run in process against the library's own model (tiny configs, a fixed seed)."""

from __future__ import annotations

import copy
import inspect

import numpy as np
import pytest

import convert
from convert.validators.generation import decode

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

ANNOTATIONS = {"typed a Cache": "Cache | None", "typed tensors per layer": "tuple[tuple[torch.FloatTensor]] | None"}
TOLERANCE = 1e-5  # the wrapper against the library's own eager step, both fp32 on the CPU


def _library_cache_name(forward) -> str:
    """What the installed transformers calls the cache argument (the fakes pass it on under that name)."""
    return "cache" if "cache" in inspect.signature(forward).parameters else "past_key_values"


def _fake_decoder_forward(original, annotation: str):
    name = _library_cache_name(original)

    def fake_forward_with_a_renamed_cache(self, input_ids=None, attention_mask=None, position_ids=None, kv_state=None, use_cache=None):
        return original(
            self, input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=use_cache, **{name: kv_state}
        )

    fake_forward_with_a_renamed_cache.__annotations__ = {"kv_state": annotation}
    return fake_forward_with_a_renamed_cache


def _fake_seq2seq_forward(original, annotation: str):
    name = _library_cache_name(original)

    def fake_forward_with_a_renamed_cache(
        self, input_ids=None, attention_mask=None, decoder_input_ids=None, encoder_outputs=None, kv_state=None, use_cache=None
    ):
        return original(
            self,
            input_ids=input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            encoder_outputs=encoder_outputs,
            use_cache=use_cache,
            **{name: kv_state},
        )

    fake_forward_with_a_renamed_cache.__annotations__ = {"kv_state": annotation}
    return fake_forward_with_a_renamed_cache


@pytest.mark.parametrize("annotation", ANNOTATIONS.values(), ids=ANNOTATIONS)
def test_a_decoder_takes_its_cache_under_the_parameter_its_forward_types(annotation):
    from fixtures.transformers_folders import SEED, llama

    torch.manual_seed(SEED)
    library = llama().eval()
    renamed = copy.deepcopy(library)
    renamed.__class__ = type(
        "FakeLlamaWithARenamedCache", (type(library),), {"forward": _fake_decoder_forward(type(library).forward, annotation)}
    )
    source = convert.load(renamed, task="text-generation-with-past")
    assert "kv_state" not in [s.name for s in source.signature.inputs] and source.generation.layers == 2
    prompts = np.array([[5, 9, 200, 3, 17], [8, 1, 44, 71, 2]], dtype=np.int64)
    ours = decode(source.run, source.generation, prompts, 8).tokens
    with torch.no_grad():
        theirs = library.generate(torch.from_numpy(prompts), max_new_tokens=8, min_new_tokens=8, do_sample=False)
    assert ours.tolist() == theirs[:, 5:].numpy().tolist()


@pytest.fixture(scope="module")
def bart(tmp_path_factory):
    """A BART folder, and the library's own two steps on a padded batch: the inputs, the first step's cache under
    Optimum's names (read before the second step grows it), and both steps' outputs."""
    from fixtures.transformers_folders import write_folder

    folder = write_folder("bart", tmp_path_factory.mktemp("with_past") / "bart")
    model = transformers.BartForConditionalGeneration.from_pretrained(folder).eval()
    rng = np.random.default_rng(5)
    ids, mask = rng.integers(3, 900, (2, 6)), np.ones((2, 6), dtype=np.int64)
    mask[1, 4:] = 0
    first_ids, later_ids = rng.integers(3, 900, (2, 3)), rng.integers(3, 900, (2, 2))
    with torch.no_grad():
        states = model.get_encoder()(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).last_hidden_state
        step = dict(encoder_outputs=(states,), attention_mask=torch.from_numpy(mask), use_cache=True)
        first = model(decoder_input_ids=torch.from_numpy(first_ids), **step)
        cache = first.past_key_values
        past = {}
        for part, own in (("decoder", cache.self_attention_cache), ("encoder", cache.cross_attention_cache)):
            for i, layer in enumerate(own.layers):
                past[f"past_key_values.{i}.{part}.key"], past[f"past_key_values.{i}.{part}.value"] = (
                    layer.keys.numpy(),
                    layer.values.numpy(),
                )
        second = model(decoder_input_ids=torch.from_numpy(later_ids), **{_library_cache_name(type(model).forward): cache}, **step)
    feeds = {"first": first_ids, "later": later_ids, "mask": mask, "states": states.numpy(), "past": past}
    return folder, feeds, first.logits.numpy(), second.logits.numpy()


def _close(got: np.ndarray, want: np.ndarray, what: str) -> None:
    assert got.shape == want.shape and np.abs(got - want).max() <= TOLERANCE, what


@pytest.mark.parametrize("annotation", ANNOTATIONS.values(), ids=ANNOTATIONS)
def test_an_encoder_decoder_s_decoders_take_their_cache_under_the_parameter_its_forward_types(bart, annotation, monkeypatch):
    folder, feeds, first, second = bart
    bart_class = transformers.BartForConditionalGeneration
    monkeypatch.setattr(bart_class, "forward", _fake_seq2seq_forward(bart_class.forward, annotation))
    mask, states = feeds["mask"], feeds["states"]
    own = {name: value for name, value in feeds["past"].items() if ".decoder." in name}

    # the components of the folder (convert/sources/encoder_decoder.py)
    decoder = convert.load(folder, component="decoder").run(
        {"input_ids": feeds["first"], "encoder_attention_mask": mask, "encoder_hidden_states": states}
    )
    _close(decoder["logits"], first, "the decoder's first step")
    for name, value in feeds["past"].items():
        _close(decoder[name.replace("past_key_values", "present")], value, name)
    later = convert.load(folder, component="decoder_with_past").run(
        {"input_ids": feeds["later"], "encoder_attention_mask": mask, **feeds["past"]}
    )
    _close(later["logits"], second, "decoder_with_past's step")

    # the decoder of a model object (convert/sources/transformers.py), its cross-attention computed from the states
    model = bart_class.from_pretrained(folder).eval()
    source = convert.load(model, task="text2text-generation-with-past")
    step = source.run({"input_ids": feeds["later"], "encoder_attention_mask": mask, "encoder_hidden_states": states, **own})
    _close(step["logits"], second, "the model object's decoder step")
