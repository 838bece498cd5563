"""Reference benchmark models (random weights) and CPU measurement helpers.

Plain ``torch.nn`` re-implementations of a BERT-base-sized encoder and a
ResNet-50-sized CNN (no torchvision / transformers needed), deterministic
random inputs, a FLOP counter and a measured FP32 GEMM peak, so that exported
artifacts can be compared against the compute lower bound
``model_flops / matmul_peak_gflops``.
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "BERT_VOCAB",
    "BERT_SEQ",
    "INPUT_SPECS",
    "bert_base_encoder",
    "resnet50",
    "mobilenet_v2",
    "small_bert",
    "build",
    "example_inputs",
    "input_specs",
    "model_flops",
    "matmul_peak_gflops",
]

BERT_VOCAB = 30522
BERT_SEQ = 128
RESNET_HW = 224
SMALL_BERT_VOCAB = 8000

# ``--input`` spec strings for the tool, per model.
INPUT_SPECS: dict[str, list] = {
    "bert": [
        f"input_ids:int64[B,S]{{0..{BERT_VOCAB - 1}}}",
        "attention_mask:int64[B,S]{1..1}",
    ],
    "resnet50": [f"x:float32[B,3,{RESNET_HW},{RESNET_HW}]"],
    "mobilenet_v2": [f"x:float32[B,3,{RESNET_HW},{RESNET_HW}]"],
    "small_bert": [f"input_ids:int64[B,S]{{0..{SMALL_BERT_VOCAB - 1}}}", "attention_mask:int64[B,S]{1..1}"],
}


# --------------------------------------------------------------------------- BERT
class _SelfAttention(nn.Module):
    def __init__(self, hidden: int, heads: int, use_sdpa: bool):
        super().__init__()
        self.heads = heads
        self.head_dim = hidden // heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, hidden)
        self.use_sdpa = use_sdpa

    def forward(self, x: torch.Tensor, mask_bias: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = self.query(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = self.key(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        v = self.value(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        if self.use_sdpa:
            ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=mask_bias)
        else:  # explicit HF-style pattern (what ORT's BERT fusion expects)
            scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
            probs = torch.softmax(scores + mask_bias, dim=-1)
            ctx = torch.matmul(probs, v)
        ctx = ctx.transpose(1, 2).reshape(b, s, self.heads * self.head_dim)
        return self.out(ctx)


class _EncoderLayer(nn.Module):
    def __init__(self, hidden: int, heads: int, ffn: int, use_sdpa: bool):
        super().__init__()
        self.attn = _SelfAttention(hidden, heads, use_sdpa)
        self.ln1 = nn.LayerNorm(hidden, eps=1e-12)
        self.fc1 = nn.Linear(hidden, ffn)
        self.fc2 = nn.Linear(ffn, hidden)
        self.ln2 = nn.LayerNorm(hidden, eps=1e-12)

    def forward(self, x: torch.Tensor, mask_bias: torch.Tensor) -> torch.Tensor:
        x = self.ln1(x + self.attn(x, mask_bias))
        return self.ln2(x + self.fc2(F.gelu(self.fc1(x))))


class BertEncoder(nn.Module):
    """Post-LN BERT encoder; returns (last_hidden_state, pooler_output)."""

    def __init__(
        self,
        vocab: int = BERT_VOCAB,
        hidden: int = 768,
        layers: int = 12,
        heads: int = 12,
        ffn: int = 3072,
        max_pos: int = 512,
        use_sdpa: bool = False,
    ):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, hidden)
        self.position_embeddings = nn.Embedding(max_pos, hidden)
        self.token_type_embeddings = nn.Embedding(2, hidden)
        self.emb_ln = nn.LayerNorm(hidden, eps=1e-12)
        self.layers = nn.ModuleList(_EncoderLayer(hidden, heads, ffn, use_sdpa) for _ in range(layers))
        self.pooler = nn.Linear(hidden, hidden)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor):
        s = input_ids.shape[1]
        pos = torch.arange(s, device=input_ids.device).unsqueeze(0)
        x = self.word_embeddings(input_ids) + self.position_embeddings(pos) + self.token_type_embeddings.weight[0]
        x = self.emb_ln(x)
        # [B,1,1,S] additive mask, HF-style (0 keep / -10000 masked).
        mask_bias = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
        for layer in self.layers:
            x = layer(x, mask_bias)
        pooled = torch.tanh(self.pooler(x[:, 0]))
        return x, pooled


def bert_base_encoder(seed: int = 0, use_sdpa: bool = False) -> nn.Module:
    """BERT-base-sized encoder (12x768, 12 heads, FFN 3072), random init, eval."""
    torch.manual_seed(seed)
    m = BertEncoder(use_sdpa=use_sdpa)
    for mod in m.modules():  # BERT init: N(0, 0.02), zero bias, unit LN
        if isinstance(mod, (nn.Linear, nn.Embedding)):
            nn.init.normal_(mod.weight, std=0.02)
            if isinstance(mod, nn.Linear):
                nn.init.zeros_(mod.bias)
        elif isinstance(mod, nn.LayerNorm):
            nn.init.ones_(mod.weight)
            nn.init.zeros_(mod.bias)
    return m.eval()


# ------------------------------------------------------------------------ ResNet
class _Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, width: int, stride: int):
        super().__init__()
        cout = width * self.expansion
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        idt = x if self.downsample is None else self.downsample(x)
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return F.relu(y + idt)


class ResNet(nn.Module):
    """torchvision-layout ResNet with bottleneck blocks (v1.5: stride on 3x3)."""

    def __init__(self, blocks=(3, 4, 6, 3), num_classes: int = 1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        layers, cin = [], 64
        for i, n in enumerate(blocks):
            width = 64 * 2**i
            stage = []
            for j in range(n):
                stage.append(_Bottleneck(cin, width, 2 if (j == 0 and i > 0) else 1))
                cin = width * _Bottleneck.expansion
            layers.append(nn.Sequential(*stage))
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def resnet50(seed: int = 0, calib_batches: int = 2, calib_batch: int = 8, center_logits: bool = True) -> nn.Module:
    """ResNet-50-sized CNN ([3,4,6,3], 64..2048), random init, non-degenerate.

    BatchNorm running stats are set from the batch statistics of seeded
    in-domain inputs (so every layer sees ~unit-scale, input-dependent
    activations), gamma/beta are randomised, the residual branch is damped and
    (``center_logits``) the fc bias centres the logits. Without centring,
    random-weight ResNet logits are ~identical across inputs (cosine between
    *different* inputs > 0.999), so an INT8 cosine check is vacuous; with it,
    the input-dependent ~5% of the pooled features is what the cosine sees, so
    quantisation noise is amplified ~20x (INT8 PTQ gives cosine ~0.93-0.95).
    """
    torch.manual_seed(seed)
    m = ResNet()
    g = torch.Generator().manual_seed(seed + 1)
    for mod in m.modules():
        if isinstance(mod, nn.Conv2d):
            nn.init.kaiming_normal_(mod.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(mod, nn.BatchNorm2d):
            mod.momentum = None  # cumulative average over calibration batches
            mod.reset_running_stats()
    # Data-dependent BN statistics (identity affine while calibrating).
    m.train()
    with torch.no_grad():
        for i in range(calib_batches):
            x = example_inputs("resnet50", calib_batch, seed=10_000 + seed + i)["x"]
            m(torch.from_numpy(x))
    m.eval()
    with torch.no_grad():
        for name, mod in m.named_modules():
            if isinstance(mod, nn.BatchNorm2d):
                c = mod.num_features
                mod.momentum = 0.1
                gamma = 0.5 if name.endswith("bn3") else 1.0
                mod.weight.copy_(gamma * (0.75 + 0.5 * torch.rand(c, generator=g)))
                mod.bias.copy_(0.1 * torch.randn(c, generator=g))
        feats = []
        for i in range(calib_batches):
            x = example_inputs("resnet50", calib_batch, seed=10_000 + seed + i)["x"]
            m.fc, fc = nn.Identity(), m.fc
            feats.append(m(torch.from_numpy(x)))
            m.fc = fc
        f = torch.cat(feats)
        nn.init.normal_(m.fc.weight, std=1.0 / math.sqrt(f.shape[1]))
        m.fc.weight.div_(f.std(0).mean())  # ~unit-scale centred logits
        if center_logits:
            m.fc.bias.copy_(-m.fc.weight @ f.mean(0))
        else:
            nn.init.zeros_(m.fc.bias)
    return m


# ------------------------------------------------------------------ edge models
class _InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int):
        super().__init__()
        hidden = cin * expand
        layers: list[nn.Module] = []
        if expand != 1:
            layers += [nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6()]
        layers += [
            nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False),
            nn.BatchNorm2d(hidden),
            nn.ReLU6(),
            nn.Conv2d(hidden, cout, 1, bias=False),
            nn.BatchNorm2d(cout),
        ]
        self.block = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        return x + self.block(x) if self.residual else self.block(x)


class MobileNetV2(nn.Module):
    """torchvision-layout MobileNetV2 (width 1.0): inverted residuals with depthwise 3x3 convolutions."""

    SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))

    def __init__(self, classes: int = 1000):
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU6()]
        cin = 32
        for expand, cout, repeats, stride in self.SETTINGS:
            for index in range(repeats):
                layers.append(_InvertedResidual(cin, cout, stride if index == 0 else 1, expand))
                cin = cout
        layers += [nn.Conv2d(cin, 1280, 1, bias=False), nn.BatchNorm2d(1280), nn.ReLU6()]
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(1280, classes)

    def forward(self, x):
        return self.classifier(self.features(x).mean((2, 3)))


def mobilenet_v2(seed: int = 0) -> nn.Module:
    """MobileNetV2-sized CNN (224x224, ~0.6 GFLOPs a forward), random init with randomised BatchNorm statistics, eval."""
    torch.manual_seed(seed)
    model = MobileNetV2()
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.BatchNorm2d):
                module.running_mean.normal_(0, 0.1)
                module.running_var.uniform_(0.5, 1.5)
                module.weight.uniform_(0.5, 1.5)
                module.bias.normal_(0, 0.1)
    return model.eval()


def small_bert(seed: int = 0) -> nn.Module:
    """A small BERT encoder (4 layers, hidden 256, 4 heads, FFN 1024, vocab 8000), BERT init, eval."""
    torch.manual_seed(seed)
    model = BertEncoder(vocab=SMALL_BERT_VOCAB, hidden=256, layers=4, heads=4, ffn=1024)
    for module in model.modules():
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
    return model.eval()


def build(name: str, **kw) -> nn.Module:
    """Model by name: 'bert', 'resnet50', 'mobilenet_v2' or 'small_bert'."""
    builders = {"bert": bert_base_encoder, "resnet50": resnet50, "mobilenet_v2": mobilenet_v2, "small_bert": small_bert}
    return builders[name](**kw)


# ------------------------------------------------------------------------ inputs
def input_specs(name: str) -> list:
    """The ``--input`` spec strings for ``name``."""
    return list(INPUT_SPECS[name])


def example_inputs(name: str, batch: int, seed: int = 0, seq: int = BERT_SEQ) -> dict[str, np.ndarray]:
    """Deterministic in-domain random inputs for ``name`` at ``batch``."""
    rng = np.random.default_rng(seed)
    if name in ("bert", "small_bert"):
        vocab = BERT_VOCAB if name == "bert" else SMALL_BERT_VOCAB
        return {
            "input_ids": rng.integers(0, vocab, size=(batch, seq), dtype=np.int64),
            "attention_mask": np.ones((batch, seq), dtype=np.int64),
        }
    if name in ("resnet50", "mobilenet_v2"):
        # ImageNet-normalised uniform pixels.
        img = rng.random((batch, 3, RESNET_HW, RESNET_HW), dtype=np.float32)
        mean = np.array([0.485, 0.456, 0.406], np.float32)[:, None, None]
        std = np.array([0.229, 0.224, 0.225], np.float32)[:, None, None]
        return {"x": ((img - mean) / std).astype(np.float32)}
    raise KeyError(name)


# ------------------------------------------------------------------- FLOPs/peak
def model_flops(model: nn.Module, inputs: dict[str, np.ndarray]) -> float:
    """FLOPs of one forward (FlopCounterMode: 2*MACs for matmul/conv)."""
    from torch.utils.flop_counter import FlopCounterMode

    tens = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in inputs.items()}
    counter = FlopCounterMode(display=False)
    with torch.inference_mode(), counter:
        model(**tens)
    return float(counter.get_total_flops())


def _best_time(fn, reps: int) -> float:
    """The fastest of ``reps`` timed runs of ``fn`` (the first pays any wake-up, and the minimum leaves it out)."""
    best = math.inf
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def matmul_peak_gflops(
    threads: int = 2,
    sizes=(1024, 2048, 3072),
    reps: int = 3,
    passes: int = 5,
    details: dict | None = None,
) -> float:
    """Measured FP32 GEMM peak (GFLOP/s) at ``threads``: the best any backend reached at any size.

    The backends are ``torch.mm``, ``numpy`` matmul and one-MatMul models in ONNX Runtime and OpenVINO (FP32 pinned):
    the runtimes being bounded have GEMM kernels of their own, which can be twice as fast as the BLAS that torch and
    numpy were built with (AVX-512 against AVX2), and a peak below what a runtime reaches is no bound. A peak measured
    once falls wherever the machine's slow moments fall, so the (backend, size) pairs of square float32 matrices are
    timed in ``passes`` interleaved passes, the order rotated every pass, each pair ``reps`` times a pass; each pair keeps
    its fastest run over all passes (its best GFLOP/s) and the peak is the highest of those. ``details`` (if given)
    receives ``{(backend, n): best gflops}``. About 30-40 s at 2 threads on a shared 2-core machine. torch threads are
    restored after.
    """
    prev = torch.get_num_threads()
    torch.set_num_threads(threads)
    best: dict[tuple[str, int], float] = {}
    try:
        runs = []
        for n in sizes:
            a, b, c = torch.randn(n, n), torch.randn(n, n), torch.empty(n, n)
            runs.append((("torch", n), lambda a=a, b=b, c=c: torch.mm(a, b, out=c)))
            an, bn, cn = a.numpy(), b.numpy(), np.empty((n, n), np.float32)
            runs.append((("numpy", n), lambda an=an, bn=bn, cn=cn: np.matmul(an, bn, out=cn)))
            runs += _runtime_matmuls(an, bn, threads)
        with torch.inference_mode(), _numpy_threads(threads):
            for index in range(passes):
                shift = index % len(runs)
                for key, run in runs[shift:] + runs[:shift]:
                    n = key[1]
                    best[key] = max(best.get(key, 0.0), 2.0 * n**3 / _best_time(run, reps) / 1e9)
    finally:
        torch.set_num_threads(prev)
    if details is not None:
        details.update(best)
    return max(best.values(), default=0.0)


def _runtime_matmuls(a: np.ndarray, b: np.ndarray, threads: int) -> list:
    """``a @ b`` in ONNX Runtime and in OpenVINO (FP32 inference precision), ``b`` a constant of the model as a weight
    is, each pinned to ``threads`` intra-op threads, as ``((backend, n), run)``."""
    import onnx
    import onnxruntime as ort
    import openvino as ov
    import openvino.opset13 as ops
    from onnx import helper

    n = a.shape[0]
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["c"])],
        "matmul",
        [helper.make_tensor_value_info("a", onnx.TensorProto.FLOAT, [n, n])],
        [helper.make_tensor_value_info("c", onnx.TensorProto.FLOAT, [n, n])],
        [onnx.numpy_helper.from_array(b, "b")],
    )
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    session = ort.InferenceSession(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString(),
        options,
        providers=["CPUExecutionProvider"],
    )
    parameter = ops.parameter([n, n], np.float32)
    compiled = ov.Core().compile_model(
        ov.Model([ops.matmul(parameter, ops.constant(b), False, False)], [parameter]),
        "CPU",
        {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": threads},
    )
    request = compiled.create_infer_request()
    return [
        (("onnxruntime", n), lambda: session.run(None, {"a": a})),
        (("openvino", n), lambda: request.infer({0: a})),
    ]


class _numpy_threads:
    """Limit numpy's BLAS threads if threadpoolctl is available (no-op otherwise)."""

    def __init__(self, n: int):
        self.n, self.ctx = n, None

    def __enter__(self):
        try:
            from threadpoolctl import threadpool_limits

            self.ctx = threadpool_limits(limits=self.n, user_api="blas")
            self.ctx.__enter__()
        except Exception:  # noqa: BLE001 - optional dependency
            self.ctx = None
        return self

    def __exit__(self, *exc):
        if self.ctx is not None:
            self.ctx.__exit__(*exc)
        return False
