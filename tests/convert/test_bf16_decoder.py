"""A bfloat16 checkpoint converted as it computes (--dtype bfloat16): its exports are bf16 artifacts judged by bf16's
budget; ONNX Runtime's CPU provider, which has no bfloat16 kernels, skips the ONNX artifact with that reason (so it
is not published), and the OpenVINO IR, whose bfloat16 inputs and outputs OpenVINO's Python API hands over as float16
bits, is fed and read as bfloat16 and passes, and generates as transformers' own bfloat16 model does at sizes the
validation did not use."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.conftest import load_report, run_cli


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    from fixtures.transformers_folders import SEED, llama

    root = tmp_path_factory.mktemp("bf16")
    torch.manual_seed(SEED)
    llama().eval().to(torch.bfloat16).save_pretrained(root / "llama")
    out = root / "out"
    args = ("--task", "text-generation-with-past", "--to", "onnx", "--optimize", "openvino", "--dtype", "bfloat16")
    return root / "llama", out, run_cli(str(root / "llama"), *args, "--out", str(out)), load_report(out / "report.json")


def test_the_onnx_artifact_is_skipped_on_the_cpu_and_the_ir_passes_at_bf16(converted):
    _, out, run, report = converted
    assert run.returncode == 1, run.output  # the ONNX artifact could not be validated here
    records = {r["optimization"]: r for r in report["artifacts"]}
    onnx, ir = records[""], records["openvino"]
    assert onnx["precision"] == ir["precision"] == "bf16"
    cpu = [c for c in onnx["checks"] if c["runtime"] == "onnxruntime" and c["device"] == "cpu"]
    assert cpu and all(c["status"] == "skipped" and "no bfloat16 kernel" in c["reason"] for c in cpu)
    assert onnx["passed"] is False
    assert ir["passed"] is True and (out / "llama_openvino").is_dir()
    generation = [c for c in ir["checks"] if c["kind"] == "generation"]
    assert generation and generation[0]["status"] == "passed" and generation[0]["generation"]["token_agreement"] == 1.0
    assert generation[0]["generation"]["judged_by"].startswith("token_agreement>=0.9")
    shaped = [c for c in ir["checks"] if c["kind"] != "generation" and c["status"] == "passed"]
    # judged by bf16's budget: the source computes in bfloat16, the IR in float32 over bfloat16 weights
    assert shaped and all(o["budget_source"] == "default bf16" and o["max_abs_error"] > 0 for c in shaped for o in c["outputs"])


def _bits(array: np.ndarray) -> np.ndarray:
    return torch.from_numpy(array).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)


def _widened(value: np.ndarray) -> np.ndarray:
    return torch.from_numpy(np.ascontiguousarray(value).view(np.int16)).view(torch.bfloat16).float().numpy()


def test_the_ir_generates_as_transformers_bf16_model_at_other_sizes(converted):
    """Apart from the tool: the IR run with OpenVINO directly (bfloat16 through torch's own conversion), 3 prompts of
    9 tokens and 12 steps (validation used 2 of 5 and 16), each step given transformers' own greedy token."""
    import openvino
    import transformers

    folder, out, _, _ = converted
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16).eval()
    config = model.config
    prompts = torch.randint(2, config.vocab_size, (3, 9), generator=torch.Generator().manual_seed(5))
    steps = 12
    with torch.no_grad():
        expected = model.generate(
            prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=steps, min_new_tokens=steps, do_sample=False, pad_token_id=0
        )[:, 9:]
    core = openvino.Core()
    compiled = core.compile_model(core.read_model(str(out / "llama_openvino" / "model.xml")), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    request = compiled.create_infer_request()
    head_dim = config.hidden_size // config.num_attention_heads
    past = {
        f"past_key_values.{i}.{kv}": np.zeros((3, config.num_key_value_heads, 0, head_dim), np.float32)
        for i in range(config.num_hidden_layers)
        for kv in ("key", "value")
    }
    ids, cached, chosen = prompts.numpy(), 0, []
    for step in range(steps):
        new = ids.shape[1]
        feed = {
            "input_ids": ids,
            "attention_mask": np.ones((3, cached + new), np.int64),
            "position_ids": np.broadcast_to(np.arange(cached, cached + new), (3, new)).astype(np.int64),
            **{name: openvino.Tensor(_bits(value), value.shape, openvino.Type.bf16) for name, value in past.items()},
        }
        results = {port.get_any_name(): results for port, results in request.infer(feed).items()}
        outputs = {name: _widened(value) for name, value in results.items()}
        chosen.append(outputs["logits"][:, -1].argmax(-1))
        past = {name: outputs[name.replace("past_key_values", "present")] for name in past}
        cached += new
        ids = expected[:, step : step + 1].numpy()
    agreement = float((np.stack(chosen, 1) == expected.numpy()).mean())
    assert agreement >= 0.9, agreement
