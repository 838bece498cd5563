"""A dual encoder's towers (CLIP, SigLIP) run as a retrieval system runs them, and its joint model, against the
library's own model on the same seeded texts and images.

The text tower's and the vision tower's artifacts embed the texts and the images; their embeddings are normalised and
scored as the library's forward scores them (``exp(logit_scale)`` times the cosine similarity, plus SigLIP's
``logit_bias``); those logits, and the joint artifact's own, are compared with the library's ``logits_per_image``.
Texts are as a tokenizer writes them: CLIP's a start token, words and the end token, padded to the longest with a mask;
SigLIP's words and the end token, padded with the pad token to the model's length (it takes no mask). There are more
texts than images, as in a query against a gallery.

Budgets are in similarity units (a logit's error over ``exp(logit_scale)``), so one bound holds whatever the model's
scale: every logit within the precision's bound of the library's, and the best image for each text and the best text
for each image the library's (``rank_match``; a pick whose library score is within the bound of the best is a tie, not
a miss). fp16 and int8 artifacts are also held to a cosine between their embeddings and the library's. On a failure,
each tower's artifact is run alone with the library's other tower, and the joint artifact is judged alone: ``blamed``
names those that fail by themselves.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from convert.compat import library_mismatch
from convert.reports.model import AssembledCheck

TEXTS, IMAGES = 5, 3  # texts and images scored against each other: differing, so a transposed score fails
LONGEST_PADDED = 16  # the longest text where the model pads to the longest (CLIP), below its positions
# precision -> (the bound on each logit's error, in similarity units; the least cosine of an embedding to the library's)
BUDGETS = {"fp32": (1e-4, None), "fp16": (1e-2, 0.999), "bf16": (5e-2, 0.99), "int8": (5e-2, 0.98), "int4": (1e-1, 0.97)}
SELF_CHECK = 1e-5  # this check's scoring of the library's own features against the library's logits, in similarity units


@dataclass
class Scores:
    """What one way of scoring the texts against the images gave, judged against the library."""

    logits_per_image: np.ndarray  # [images, texts]
    max_abs_error: float
    cosine: float
    rank_match: float
    worst: tuple[int, int]  # (image, text) of the largest error

    def failed(self, bound: float, least_cosine: float | None) -> bool:
        return self.max_abs_error > bound or self.rank_match < 1.0 or (least_cosine is not None and self.cosine < least_cosine)


class _Broken(Exception):
    """A component's artifact that does not run, or lacks what the check reads from it."""

    def __init__(self, component: str, reason: str):
        super().__init__(reason)
        self.component = component


def check_similarity(folder: Path, artifacts: dict[str, Path], *, precision: str, seed: int, trust_code: bool) -> AssembledCheck:
    """The towers' and the joint model's ONNX artifacts (``artifacts``: component -> path) scored against the library's
    own model in ``folder``."""
    started = time.perf_counter()
    check = _check(Path(folder), artifacts, precision, seed, trust_code)
    check.seconds = round(time.perf_counter() - started, 3)
    return check


def _check(folder: Path, artifacts: dict[str, Path], precision: str, seed: int, trust_code: bool) -> AssembledCheck:
    if precision not in BUDGETS:
        return _skipped(f"no similarity budget for {precision} artifacts (budgets: {', '.join(BUDGETS)})")
    missing = [name for name in ("text_model", "vision_model", "joint") if name not in artifacts]
    if missing:
        return _skipped(f"the check runs every component together, and {', '.join(missing)} has no artifact")
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return _skipped("onnxruntime is not installed (pip install onnxruntime)")
    from convert.backends.torch import require_torch
    from convert.sources.request import SourceRequest
    from convert.sources.resolve import resolve_source

    torch = require_torch()
    # the joint component's source: the folder loaded with the same refusals as every component's
    source = resolve_source(SourceRequest(model=Path(folder), component="joint", trust_code=trust_code))
    model = source.native.model
    # a padding mask where the components take one (CLIP; SigLIP, trained on unmasked padded texts, takes none)
    takes_mask = "attention_mask" in {spec.name for spec in source.signature.inputs}
    text_feed = _texts(model.config.text_config, takes_mask, np.random.default_rng(seed))
    images = np.random.default_rng(seed + 1).standard_normal((IMAGES, *_image_shape(model.config.vision_config))).astype(np.float32)
    scale = float(model.logit_scale.detach().exp().reshape(()))
    bias = float(model.logit_bias.detach().reshape(())) if getattr(model, "logit_bias", None) is not None else 0.0
    tensors = {name: torch.from_numpy(array) for name, array in text_feed.items()}
    with torch.no_grad():
        library = model(**tensors, pixel_values=torch.from_numpy(images), return_dict=True)
        text_library = _projected(model.get_text_features(**tensors))
        image_library = _projected(model.get_image_features(pixel_values=torch.from_numpy(images)))
    expected = library.logits_per_image.double().numpy()
    text_library, image_library = text_library.double().numpy(), image_library.double().numpy()
    assembled = _logits(text_library, image_library, scale, bias)
    if np.abs(assembled - expected).max() > SELF_CHECK * scale:
        raise library_mismatch(
            "transformers",
            f"{type(model).__name__}'s logits are not exp(logit_scale) times the cosine of get_text_features and "
            f"get_image_features{' plus logit_bias' if bias else ''} (off by {np.abs(assembled - expected).max():.3g})",
        )
    bound_similarity, least_cosine = BUDGETS[precision]
    bound = bound_similarity * scale
    budget = (
        f"{precision}: every logit within {bound_similarity:g} x exp(logit_scale) = {bound:.4g} of the library's, towers "
        "and joint; rank_match == 1 (the best image per text and text per image, ties within that bound aside)"
        + (f"; cosine >= {least_cosine:g} of each embedding to the library's" if least_cosine is not None else "")
    )
    shape = f"{TEXTS} texts of {text_feed['input_ids'].shape[1]} tokens{' with a padding mask' if takes_mask else ''}, {IMAGES} images"
    judged = _Judge(expected, scale, bias, bound)
    try:
        text_embeds = _run(artifacts["text_model"], "text_model", text_feed, "text_embeds")
        image_embeds = _run(artifacts["vision_model"], "vision_model", {"pixel_values": images}, "image_embeds")
        joint = _run_joint(artifacts["joint"], {**text_feed, "pixel_values": images})
    except _Broken as broken:
        return AssembledCheck(
            name="similarity", artifact="", status="failed", reason=str(broken), budget=budget, blamed=[broken.component], detail=shape
        )
    towers = judged.towers(text_embeds, image_embeds, text_library, image_library)
    together = judged.joint(joint, text_library, image_library)
    metrics = {
        "max_abs_error": towers.max_abs_error,
        "joint_max_abs_error": together.max_abs_error,
        "cosine": towers.cosine,
        "joint_cosine": together.cosine,
        "rank_match": towers.rank_match,
        "joint_rank_match": together.rank_match,
        "logit_scale_exp": scale,
    }
    detail = (
        f"{shape}; the towers' logits within {towers.max_abs_error:.3g} of the library's, the joint model's within "
        f"{together.max_abs_error:.3g} (exp(logit_scale) = {scale:.4g}{f', logit_bias = {bias:.4g}' if bias else ''})"
    )
    failing = [
        name
        for name, scores in (("the towers' (text_model and vision_model together)", towers), ("the joint model's", together))
        if scores.failed(bound, least_cosine)
    ]
    if not failing:
        return AssembledCheck(name="similarity", artifact="", status="passed", metrics=metrics, budget=budget, detail=detail)
    blamed = [
        name
        for name, scores in (
            ("text_model", judged.towers(text_embeds, image_library, text_library, image_library)),
            ("vision_model", judged.towers(text_library, image_embeds, text_library, image_library)),
            ("joint", together),
        )
        if scores.failed(bound, least_cosine)
    ]
    worst = towers if towers.failed(bound, least_cosine) else together
    image, text = worst.worst
    return AssembledCheck(
        name="similarity",
        artifact="",
        status="failed",
        reason=f"{' and '.join(failing)} scores of texts against images are not the library's "
        f"(max error {worst.max_abs_error:.4g}, rank_match {worst.rank_match:.3g}, cosine {worst.cosine:.6g}; budget: {budget})",
        metrics=metrics,
        budget=budget,
        diverged_at=f"image {image} x text {text}: logit {worst.logits_per_image[image, text]:.6g}, the library's {expected[image, text]:.6g}",
        blamed=blamed,
        detail=detail,
    )


class _Judge:
    """Scores of texts against images, judged against the library's logits ``expected`` [images, texts]."""

    def __init__(self, expected: np.ndarray, scale: float, bias: float, bound: float):
        self.expected, self.scale, self.bias, self.bound = expected, scale, bias, bound

    def towers(self, text: np.ndarray, image: np.ndarray, text_library: np.ndarray, image_library: np.ndarray) -> Scores:
        """The towers' embeddings (``text``, ``image``) scored as the library scores its own."""
        cosine = min(_least_cosine(text, text_library), _least_cosine(image, image_library))
        return self._scores(_logits(text, image, self.scale, self.bias), cosine)

    def joint(self, joint: dict[str, np.ndarray], text_library: np.ndarray, image_library: np.ndarray) -> Scores:
        """The joint model's own logits; its transposed ``logits_per_text`` held to the same bound."""
        scores = self._scores(
            joint["logits_per_image"],
            min(_least_cosine(joint["text_embeds"], text_library), _least_cosine(joint["image_embeds"], image_library)),
        )
        scores.max_abs_error = max(scores.max_abs_error, float(np.abs(joint["logits_per_text"].T - self.expected).max()))
        return scores

    def _scores(self, logits: np.ndarray, cosine: float) -> Scores:
        error = np.abs(logits - self.expected)
        worst = np.unravel_index(int(np.argmax(error)), error.shape)
        return Scores(logits, float(error.max()), cosine, self._rank_match(logits), (int(worst[0]), int(worst[1])))

    def _rank_match(self, logits: np.ndarray) -> float:
        """The fraction of images (their best text) and texts (their best image) whose pick is the library's, or one
        the library scores within the bound of its best (a tie)."""
        hits = []
        for got, want in ((logits, self.expected), (logits.T, self.expected.T)):
            picked = want[np.arange(len(want)), got.argmax(axis=1)]
            hits.extend(picked >= want.max(axis=1) - self.bound)
        return float(np.mean(hits))


def _logits(text: np.ndarray, image: np.ndarray, scale: float, bias: float) -> np.ndarray:
    """logits_per_image [images, texts] as the library computes it: the normalised embeddings' cosine times
    exp(logit_scale), plus SigLIP's bias."""
    text = text / np.linalg.norm(text, axis=-1, keepdims=True)
    image = image / np.linalg.norm(image, axis=-1, keepdims=True)
    return (text @ image.T * scale + bias).T


def _least_cosine(got: np.ndarray, want: np.ndarray) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    norms = np.linalg.norm(got, axis=-1) * np.linalg.norm(want, axis=-1)
    return float(np.min(np.sum(got * want, axis=-1) / np.maximum(norms, 1e-30)))


def _projected(output):
    """The projected features ``get_text_features`` / ``get_image_features`` return: their ``pooler_output`` since
    transformers 5, the tensor itself before."""
    return output if hasattr(output, "double") else output.pooler_output


def _texts(text_config, takes_mask: bool, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Tokenized texts of several lengths as the model's tokenizer writes them: CLIP's (a mask taken) a start token,
    words and the end token, padded to the longest; SigLIP's words and the end token padded to the model's length with
    the pad token, no mask. CLIP configs of the first release (``eos_token_id`` 2) pool at the highest id, which is its
    tokenizer's end token: the end token is the vocabulary's last there."""
    vocab, positions = text_config.vocab_size, text_config.max_position_embeddings
    eos = text_config.eos_token_id if text_config.eos_token_id not in (None, 2) else vocab - 1
    pad = text_config.pad_token_id if text_config.pad_token_id is not None else eos
    bos = text_config.bos_token_id if takes_mask and text_config.bos_token_id is not None else None
    special = {token for token in (bos, eos, pad) if token is not None}
    words = np.setdiff1d(np.arange(vocab), sorted(special))
    length = min(LONGEST_PADDED, positions) if takes_mask else positions
    head = 2 if bos is not None else 1  # the tokens besides the words: start and end
    counts = [length - head, *rng.integers(1, length - head, size=TEXTS - 1, endpoint=True)]  # the first text the longest
    ids = np.full((TEXTS, length), pad, dtype=np.int64)
    mask = np.zeros((TEXTS, length), dtype=np.int64)
    for row, count in enumerate(counts):
        tokens = [*([bos] if bos is not None else []), *rng.choice(words, size=count), eos]
        ids[row, : len(tokens)] = tokens
        mask[row, : len(tokens)] = 1
    return {"input_ids": ids, "attention_mask": mask} if takes_mask else {"input_ids": ids}


def _image_shape(vision_config) -> tuple[int, int, int]:
    size = vision_config.image_size
    height, width = (size, size) if isinstance(size, int) else tuple(size)
    return vision_config.num_channels, height, width


NUMPY_TYPES = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(double)": np.float64,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
}


def _session(path: Path, component: str):
    import onnxruntime

    try:
        return onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception as exc:  # ONNX Runtime raises its own exception types, with the reason in the message
        raise _Broken(component, f"ONNX Runtime cannot load the {component} artifact {path}: {exc}") from exc


def _outputs(path: Path, component: str, feed: dict[str, np.ndarray], names: tuple[str, ...]) -> dict[str, np.ndarray]:
    """The artifact's outputs ``names`` on the feed (each input cast to the type the artifact declares), as float64."""
    session = _session(path, component)
    declared = {i.name: i.type for i in session.get_inputs()}
    unknown = sorted(set(declared) - set(feed))
    absent = sorted(set(names) - {o.name for o in session.get_outputs()})
    if unknown or absent:
        raise _Broken(
            component,
            f"the {component} artifact {path.name} "
            + (f"takes {', '.join(unknown)}, which the check does not give" if unknown else f"has no output {', '.join(absent)}"),
        )
    inputs = {name: feed[name].astype(NUMPY_TYPES.get(kind, feed[name].dtype)) for name, kind in declared.items()}
    try:
        values = session.run(list(names), inputs)
    except Exception as exc:  # ONNX Runtime's own exception types
        raise _Broken(component, f"the {component} artifact fails in ONNX Runtime: {exc}") from exc
    return {name: np.asarray(value, np.float64) for name, value in zip(names, values, strict=True)}


def _run(path: Path, component: str, feed: dict[str, np.ndarray], output: str) -> np.ndarray:
    return _outputs(Path(path), component, feed, (output,))[output]


def _run_joint(path: Path, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return _outputs(Path(path), "joint", feed, ("logits_per_image", "logits_per_text", "text_embeds", "image_embeds"))


def _skipped(reason: str) -> AssembledCheck:
    return AssembledCheck(name="similarity", artifact="", status="skipped", reason=reason)
