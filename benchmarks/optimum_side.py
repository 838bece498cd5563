"""Export model folders with Hugging Face Optimum's ONNX exporter, for comparison.

Runs in its own virtual environment, NOT the project's: optimum-onnx 0.1.0 (the
package that now holds ``optimum.exporters.onnx``) requires
``transformers<4.58.0,>=4.36`` and ``optimum~=2.1.0``, while the project uses
transformers 5.x. A working set on CPU is optimum-onnx 0.1.0, optimum 2.1.0,
transformers 4.57.6, torch 2.13.0+cpu, onnx 1.23.2, onnxruntime 1.32.0:

    python3.11 -m venv /work/optimum-venv
    echo "torch==2.13.0" > constraints-optimum.txt
    /work/optimum-venv/bin/pip install -c constraints-optimum.txt optimum-onnx onnxruntime

(``optimum[onnx]==2.3.0`` does not resolve: every optimum-onnx release pins
optimum ~=2.0.0 or ~=2.1.0.)

Usage (with that venv's python):

    python benchmarks/optimum_side.py --folders DIR --out results.json
    python benchmarks/optimum_side.py --load-decoder FOLDER MODEL.onnx --out result.json

The second form loads a decoder with its cache made by another exporter with Optimum's ORTModelForCausalLM and
compares its greedy generation with the transformers model's (``load_decoder``).

DIR holds one subfolder per model, each written by ``save_pretrained`` and
holding a ``task.txt`` file with the Optimum task name, e.g. ``fill-mask``,
``text-generation-with-past``, ``text2text-generation-with-past``,
``image-classification``, ``automatic-speech-recognition-with-past``.

For each folder the script:

1. calls ``optimum.exporters.onnx.main_export`` (validation on, CPU, no hub
   access: HF_HUB_OFFLINE=1 is forced) and times the call. The time includes
   loading the model, the export, Optimum's post-processing (decoder merge) and
   Optimum's own validation. For Whisper-style configs the dummy audio length
   is set to ``2 * max_source_positions`` (Optimum's default is 3000 frames,
   which only fits ``max_source_positions=1500``).
2. records Optimum's own validation result: the largest |reference - onnx|
   over all outputs Optimum validated (``optimum_max_abs_error``; Optimum only
   prints it when it exceeds its tolerance, so it is recorded by wrapping
   ``numpy.allclose`` while validation runs), its tolerance (``optimum_atol``)
   and any tolerance / output-name warning (``optimum_warning``; Optimum
   treats those as warnings, not failures).
3. measures its own error (``max_abs_error``): runs the exported ONNX files
   with onnxruntime (CPUExecutionProvider) and the transformers model from the
   same folder in this venv, on the same fixed-seed inputs (batch 1, numpy
   seed 0), and takes the largest absolute difference over the compared
   outputs (listed per file in ``compared``):

   * single-file models (encoders, image classifiers): every output, i.e.
     ``logits``.
   * decoders with past (``model.onnx`` with ``past_key_values.*`` inputs): one
     first step of 8 tokens with an empty past (past length 0); compares
     ``logits`` and every ``present.*`` key/value against the model's cache.
   * encoder-decoders (``encoder_model.onnx`` + ``decoder_model.onnx``, or
     ``decoder_model_merged.onnx`` with ``use_cache_branch=False`` when the
     plain decoder is absent): the encoder's ``last_hidden_state`` on 8 tokens
     (or on random mel features of full length for speech models); then one
     decoder step of 4 tokens without past, fed the PyTorch encoder output so
     the decoder is measured on its own: ``logits`` and the
     ``present.*.decoder.*`` / ``present.*.encoder.*`` caches.
     ``decoder_with_past_model.onnx`` is not run.

Output JSON is a list with one entry per model:
``{"model", "task", "ok", "seconds", "error", "files", "max_abs_error", ...}``
where ``ok`` means ``main_export`` returned without raising, ``error`` is the
first line of the exception (export or, with ``ok`` true, the script's own
check), ``files`` lists the files written (relative to the model's output
folder). Extra keys: ``optimum_max_abs_error``, ``optimum_atol``,
``optimum_warning``, ``compared``, ``check_seconds``. The JSON is rewritten
after every model, so a crash keeps the results so far.
"""

import argparse
import gc
import json
import logging
import os
import shutil
import sys
import time
import traceback

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

SEED = 0
TEXT_LEN = 8
DECODER_LEN = 4

ORT_DTYPES = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(double)": np.float64,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(bool)": np.bool_,
}


def first_line(exc):
    text = str(exc).strip()
    line = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {line}" if line else type(exc).__name__


def list_files(folder):
    out = []
    for root, _, names in os.walk(folder):
        for name in names:
            out.append(os.path.relpath(os.path.join(root, name), folder))
    return sorted(out)


class OptimumValidationRecorder:
    """Records Optimum's own validation diffs and warnings during main_export.

    Optimum's ``_run_validation`` checks each output with ``np.allclose`` and
    prints the max difference only on failure; the wrapper computes it for
    every call made from that function and returns allclose's own answer.
    """

    def __init__(self):
        self.diffs = []
        self.atols = set()
        self.warnings = []
        self._orig = None
        self._handler = None

    def __enter__(self):
        self._orig = np.allclose
        orig = self._orig
        recorder = self

        def allclose(a, b, *args, **kwargs):
            caller = sys._getframe(1).f_code.co_name
            if caller == "_run_validation":
                try:
                    a_arr, b_arr = np.asarray(a), np.asarray(b)
                    if a_arr.shape == b_arr.shape and a_arr.size:
                        diff = np.abs(a_arr.astype(np.float64) - b_arr.astype(np.float64))
                        recorder.diffs.append(float(np.max(diff)))
                    if "atol" in kwargs:
                        recorder.atols.add(float(kwargs["atol"]))
                except Exception:
                    pass
            return orig(a, b, *args, **kwargs)

        np.allclose = allclose

        class Handler(logging.Handler):
            def emit(self, record):
                msg = record.getMessage()
                if "succeeded with the warning" in msg or "values not close" in msg:
                    recorder.warnings.append(msg.strip().splitlines()[0])

        self._handler = Handler(level=logging.WARNING)
        logging.getLogger("optimum").addHandler(self._handler)
        return self

    def __exit__(self, *exc):
        np.allclose = self._orig
        logging.getLogger("optimum").removeHandler(self._handler)
        return False


def export_shape_kwargs(folder):
    """Dummy-input shapes Optimum needs beyond its defaults (Whisper-style audio length)."""
    try:
        with open(os.path.join(folder, "config.json")) as f:
            cfg = json.load(f)
    except Exception:
        return {}
    if "max_source_positions" in cfg and "num_mel_bins" in cfg:
        return {"nb_max_frames": 2 * int(cfg["max_source_positions"])}
    return {}


# ----------------------------------------------------------------------------
# Own check: onnxruntime vs transformers
# ----------------------------------------------------------------------------


def load_reference(folder, task):
    from optimum.exporters.tasks import TasksManager

    base = task.replace("-with-past", "")
    model = TasksManager.get_model_from_task(base, folder, framework="pt", library_name="transformers", device="cpu")
    return model.eval()


def cache_tensors(pkv, encoder_decoder):
    """Map a transformers cache to Optimum's ``present.*`` output names."""
    import torch

    def layers(cache):
        if cache is None:
            return []
        if hasattr(cache, "layers"):
            return [(layer.keys, layer.values) for layer in cache.layers]
        if hasattr(cache, "key_cache"):
            return list(zip(cache.key_cache, cache.value_cache))
        return [tuple(x) for x in cache]

    out = {}
    if pkv is None:
        return out
    if encoder_decoder:
        if hasattr(pkv, "self_attention_cache"):
            self_layers = layers(pkv.self_attention_cache)
            cross_layers = layers(pkv.cross_attention_cache)
        else:  # legacy tuple: (self k, self v, cross k, cross v) per layer
            self_layers = [(x[0], x[1]) for x in pkv]
            cross_layers = [(x[2], x[3]) for x in pkv]
        for i, (k, v) in enumerate(self_layers):
            out[f"present.{i}.decoder.key"], out[f"present.{i}.decoder.value"] = k, v
        for i, (k, v) in enumerate(cross_layers):
            out[f"present.{i}.encoder.key"], out[f"present.{i}.encoder.value"] = k, v
    else:
        for i, (k, v) in enumerate(layers(pkv)):
            out[f"present.{i}.key"], out[f"present.{i}.value"] = k, v
    return {k: v.detach().cpu().numpy() if isinstance(v, torch.Tensor) else v for k, v in out.items()}


def empty_input(meta):
    """Zero tensor for a past / dummy input: batch axes 1, other named axes 0."""
    shape = []
    for dim in meta.shape:
        if isinstance(dim, int):
            shape.append(dim)
        elif dim is not None and "batch" in str(dim):
            shape.append(1)
        else:
            shape.append(0)
    return np.zeros(shape, dtype=ORT_DTYPES.get(meta.type, np.float32))


def build_feeds(session, named):
    feeds = {}
    for meta in session.get_inputs():
        name = meta.name
        dtype = ORT_DTYPES.get(meta.type, np.float32)
        if name in named:
            feeds[name] = np.asarray(named[name]).astype(dtype)
        elif name.startswith("past_key_values"):
            feeds[name] = empty_input(meta)
        elif name == "use_cache_branch":
            feeds[name] = np.array([False])
        else:
            raise ValueError(f"no test value for ONNX input '{name}'")
    return feeds


def compare(session, feeds, ref, label, compared):
    names = [o.name for o in session.get_outputs()]
    outputs = session.run(None, feeds)
    diffs = {}
    for name, value in zip(names, outputs):
        if name not in ref:
            diffs[name] = "not compared"
            continue
        expected = np.asarray(ref[name])
        if expected.shape != value.shape:
            raise ValueError(f"{label}:{name} shape {value.shape} != reference {expected.shape}")
        diffs[name] = float(np.max(np.abs(expected.astype(np.float64) - value.astype(np.float64)))) if value.size else 0.0
    compared[label] = diffs
    return [d for d in diffs.values() if isinstance(d, float)]


def session_for(path):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort.InferenceSession(path, sess_options=opts, providers=["CPUExecutionProvider"])


def audio_or_text(cfg, inputs, rng, low, vocab):
    """Audio features at the encoder's length where the model takes them, else token ids and their mask (batch 1)."""
    if "input_features" in inputs:
        mel = int(getattr(cfg, "num_mel_bins", 80))
        frames = 2 * int(getattr(cfg, "max_source_positions", 1500))
        return {"input_features": rng.standard_normal((1, mel, frames)).astype(np.float32)}
    return {
        "input_ids": rng.integers(low, vocab, (1, TEXT_LEN), dtype=np.int64),
        "attention_mask": np.ones((1, TEXT_LEN), dtype=np.int64),
    }


def own_check(folder, task, onnx_dir):
    """Return (max_abs_error, compared) for one exported model."""
    import torch

    model = load_reference(folder, task)
    cfg = model.config
    rng = np.random.default_rng(SEED)
    vocab = int(getattr(cfg, "vocab_size", 100) or 100)
    low = min(3, vocab - 1)
    compared = {}
    all_diffs = []
    files = set(os.listdir(onnx_dir))

    if "encoder_model.onnx" in files:
        enc = session_for(os.path.join(onnx_dir, "encoder_model.onnx"))
        enc_inputs = {i.name for i in enc.get_inputs()}
        named = audio_or_text(cfg, enc_inputs, rng, low, vocab)
        torch_enc_kwargs = {k: torch.from_numpy(v) for k, v in named.items() if k in enc_inputs}
        with torch.no_grad():
            enc_hidden = model.get_encoder()(**torch_enc_kwargs).last_hidden_state
        all_diffs += compare(enc, build_feeds(enc, named), {"last_hidden_state": enc_hidden.numpy()}, "encoder_model.onnx", compared)

        dec_file = "decoder_model.onnx" if "decoder_model.onnx" in files else "decoder_model_merged.onnx"
        dec = session_for(os.path.join(onnx_dir, dec_file))
        start = getattr(cfg, "decoder_start_token_id", None)
        start = 0 if start is None else int(start)
        dec_ids = rng.integers(low, vocab, (1, DECODER_LEN), dtype=np.int64)
        dec_ids[0, 0] = start
        enc_len = enc_hidden.shape[1]
        dec_named = {
            "input_ids": dec_ids,
            "decoder_input_ids": dec_ids,
            "encoder_hidden_states": enc_hidden.numpy(),
            "encoder_attention_mask": np.ones((1, enc_len), dtype=np.int64),
            "decoder_attention_mask": np.ones((1, DECODER_LEN), dtype=np.int64),
        }
        torch_kwargs = {
            "encoder_outputs": (enc_hidden,),
            "decoder_input_ids": torch.from_numpy(dec_ids),
            "use_cache": True,
        }
        if "attention_mask" in named:
            torch_kwargs["attention_mask"] = torch.from_numpy(named["attention_mask"])
        with torch.no_grad():
            out = model(**torch_kwargs)
        ref = {"logits": out.logits.numpy()}
        ref.update(cache_tensors(getattr(out, "past_key_values", None), encoder_decoder=True))
        all_diffs += compare(dec, build_feeds(dec, dec_named), ref, dec_file, compared)

    elif "model.onnx" in files:
        sess = session_for(os.path.join(onnx_dir, "model.onnx"))
        inputs = {i.name for i in sess.get_inputs()}
        has_past = any(n.startswith("past_key_values") for n in inputs)
        named = {}
        if "pixel_values" in inputs:
            size = getattr(cfg, "image_size", 224)
            h, w = (size, size) if isinstance(size, int) else tuple(size)
            channels = int(getattr(cfg, "num_channels", 3))
            named["pixel_values"] = rng.standard_normal((1, channels, h, w)).astype(np.float32)
        else:
            named = audio_or_text(cfg, inputs, rng, low, vocab)
        if "input_ids" in named:
            named["token_type_ids"] = np.zeros((1, TEXT_LEN), dtype=np.int64)
            named["position_ids"] = np.arange(TEXT_LEN, dtype=np.int64)[None, :]
        torch_kwargs = {k: torch.from_numpy(v) for k, v in named.items() if k in inputs}
        if has_past:
            torch_kwargs["use_cache"] = True
        with torch.no_grad():
            out = model(**torch_kwargs)
        ref = {}
        for key in ("logits", "last_hidden_state", "pooler_output"):
            value = getattr(out, key, None)
            if value is not None:
                ref[key] = value.numpy()
        if has_past:
            ref.update(cache_tensors(getattr(out, "past_key_values", None), encoder_decoder=False))
        all_diffs += compare(sess, build_feeds(sess, named), ref, "model.onnx", compared)
    else:
        raise ValueError("no model.onnx or encoder_model.onnx in the export folder")

    if not all_diffs:
        raise ValueError("no output could be compared")
    return max(all_diffs), compared


# ----------------------------------------------------------------------------


def run_one(name, folder, task, onnx_root):
    from optimum.exporters.onnx import main_export

    out_dir = os.path.join(onnx_root, name)
    if os.path.exists(out_dir):
        shutil.rmtree(out_dir)
    entry = {
        "model": name,
        "task": task,
        "ok": False,
        "seconds": None,
        "error": None,
        "files": [],
        "max_abs_error": None,
        "optimum_max_abs_error": None,
        "optimum_atol": None,
        "optimum_warning": None,
        "compared": {},
        "check_seconds": None,
    }
    recorder = OptimumValidationRecorder()
    start = time.perf_counter()
    try:
        with recorder:
            main_export(
                folder,
                out_dir,
                task=task,
                device="cpu",
                do_validation=True,
                local_files_only=True,
                **export_shape_kwargs(folder),
            )
        entry["ok"] = True
    except Exception as exc:
        entry["error"] = first_line(exc)
        traceback.print_exc()
    entry["seconds"] = round(time.perf_counter() - start, 3)
    entry["files"] = list_files(out_dir) if os.path.isdir(out_dir) else []
    if recorder.diffs:
        entry["optimum_max_abs_error"] = max(recorder.diffs)
    if recorder.atols:
        entry["optimum_atol"] = max(recorder.atols)
    if recorder.warnings:
        entry["optimum_warning"] = recorder.warnings[0]

    if entry["ok"]:
        start = time.perf_counter()
        try:
            entry["max_abs_error"], entry["compared"] = own_check(folder, task, out_dir)
        except Exception as exc:
            entry["error"] = "check: " + first_line(exc)
            traceback.print_exc()
        entry["check_seconds"] = round(time.perf_counter() - start, 3)
    return entry


def load_decoder(folder, onnx_path):
    """Whether Optimum's ORTModelForCausalLM loads a decoder ONNX file made elsewhere (beside the folder's config), and
    whether its greedy generation (16 new tokens from 2 fixed prompts) gives the transformers model's tokens."""
    import tempfile

    import torch
    import transformers
    from optimum.onnxruntime import ORTModelForCausalLM

    entry = {"loads": False, "identical_tokens": None, "error": ""}
    with tempfile.TemporaryDirectory() as staged:
        for name in os.listdir(folder):
            if name.endswith(".json") or name.endswith(".safetensors"):
                shutil.copy(os.path.join(folder, name), staged)
        shutil.copy(onnx_path, os.path.join(staged, "model.onnx"))
        try:
            model = ORTModelForCausalLM.from_pretrained(staged, use_cache=True, use_io_binding=False)
        except Exception as exc:
            entry["error"] = first_line(exc)
            return entry
        entry["loads"] = True
        reference = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
        prompts = torch.tensor([[5, 9, 200, 3, 17], [7, 7, 1, 2, 3]])
        settings = {"max_new_tokens": 16, "min_new_tokens": 16, "do_sample": False, "attention_mask": torch.ones_like(prompts)}
        with torch.no_grad():
            theirs = model.generate(prompts, **settings)
            expected = reference.generate(prompts, **settings)
        entry["identical_tokens"] = bool(torch.equal(theirs, expected))
    return entry


def load_seq2seq(folder, onnx_folder):
    """Whether Optimum's ORTModel class for an encoder-decoder (Seq2SeqLM, SpeechSeq2Seq or Vision2Seq, as the config
    says) loads a folder of encoder_model.onnx, decoder_model.onnx and decoder_with_past_model.onnx made elsewhere (with
    the config beside them), and whether its greedy generate() of 8 new tokens for 2 seeded inputs gives the tokens of
    the transformers model of the source folder."""
    import numpy as np
    import torch
    import transformers
    from optimum import onnxruntime as ort_models

    config = transformers.AutoConfig.from_pretrained(folder)
    kind, model_class, reference_class = (
        ("audio", "ORTModelForSpeechSeq2Seq", transformers.AutoModelForSpeechSeq2Seq)
        if config.model_type == "whisper"
        else ("vision", "ORTModelForVision2Seq", transformers.VisionEncoderDecoderModel)
        if config.model_type == "vision-encoder-decoder"
        else ("text", "ORTModelForSeq2SeqLM", transformers.AutoModelForSeq2SeqLM)
    )
    entry = {"class": model_class, "loads": False, "tokens_equal": None, "error": ""}
    try:
        model = getattr(ort_models, model_class).from_pretrained(onnx_folder, use_cache=True, use_io_binding=False)
    except Exception as exc:
        entry["error"] = first_line(exc)
        return entry
    entry["loads"] = True
    reference = reference_class.from_pretrained(folder).eval()
    rng = np.random.default_rng(0)
    if kind == "audio":
        inputs = {
            "input_features": torch.from_numpy(
                rng.standard_normal((2, config.num_mel_bins, 2 * config.max_source_positions)).astype(np.float32)
            )
        }
    elif kind == "vision":
        size = config.encoder.image_size
        inputs = {"pixel_values": torch.from_numpy(rng.standard_normal((2, config.encoder.num_channels, size, size)).astype(np.float32))}
    else:
        ids = torch.from_numpy(rng.integers(3, config.vocab_size, (2, 7)))
        mask = torch.ones_like(ids)
        mask[1, 5:] = 0  # the second text shorter, padded at its end: the encoder's mask reaches the decoders
        ids[1, 5:] = config.pad_token_id
        inputs = {"input_ids": ids, "attention_mask": mask}
    settings = {"max_new_tokens": 8, "min_new_tokens": 8, "do_sample": False, "num_beams": 1}
    settings.update(return_dict_in_generate=True, output_logits=True)
    try:
        with torch.no_grad():
            theirs = model.generate(**inputs, **settings)
            expected = reference.generate(**inputs, **settings)
    except Exception as exc:
        entry["error"] = "generate: " + first_line(exc)
        return entry
    entry["tokens_equal"] = bool(torch.equal(theirs.sequences, expected.sequences))
    entry["tokens"] = theirs.sequences.tolist()
    entry["expected"] = expected.sequences.tolist()
    # a tiny random model's greedy tokens often repeat one token whatever its cache holds: its logits tell more
    entry["max_abs_logit_error"] = max(float((a - b).abs().max()) for a, b in zip(theirs.logits, expected.logits, strict=True))
    return entry


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--load-decoder", nargs=2, metavar=("FOLDER", "ONNX"), help="only load a decoder made elsewhere (see load_decoder)")
    parser.add_argument(
        "--load-seq2seq", nargs=2, metavar=("FOLDER", "ONNX_FOLDER"), help="only load an encoder-decoder made elsewhere (see load_seq2seq)"
    )
    parser.add_argument("--folders", help="folder with one model subfolder each (holding task.txt)")
    parser.add_argument("--out", required=True, help="results JSON file")
    parser.add_argument("--onnx-dir", default=None, help="where the ONNX exports go (default: <out without .json>_onnx/)")
    parser.add_argument("--only", nargs="*", default=None, help="export only these model names")
    args = parser.parse_args(argv)
    if args.load_decoder:
        with open(args.out, "w") as f:
            json.dump(load_decoder(*args.load_decoder), f, indent=2)
        return 0
    if args.load_seq2seq:
        with open(args.out, "w") as f:
            json.dump(load_seq2seq(*args.load_seq2seq), f, indent=2)
        return 0
    if not args.folders:
        parser.error("--folders is required")

    onnx_root = args.onnx_dir or (os.path.splitext(args.out)[0] + "_onnx")
    os.makedirs(onnx_root, exist_ok=True)
    results = []
    for name in sorted(os.listdir(args.folders)):
        folder = os.path.join(args.folders, name)
        if not os.path.isdir(folder) or (args.only and name not in args.only):
            continue
        task_file = os.path.join(folder, "task.txt")
        if not os.path.isfile(task_file):
            print(f"[skip] {name}: no task.txt", flush=True)
            continue
        with open(task_file) as f:
            task = f.read().strip()
        print(f"[export] {name} ({task})", flush=True)
        entry = run_one(name, folder, task, onnx_root)
        results.append(entry)
        print(
            f"[done] {name}: ok={entry['ok']} seconds={entry['seconds']} "
            f"max_abs_error={entry['max_abs_error']} optimum_max_abs_error={entry['optimum_max_abs_error']} "
            f"error={entry['error']}",
            flush=True,
        )
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)
        gc.collect()
    with open(args.out, "w") as f:
        json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
