#!/usr/bin/env python3
"""OLMo-core checkpoints in and out of tandem.

  import OLMO_CKPT --config RUN.yaml --run-dir RUN_DIR
      An OLMo-core checkpoint directory (stepN/ with model_and_optim/, a torch distributed
      checkpoint, and train/rank0.pt) becomes the tandem checkpoint RUN_DIR/checkpoints/step-NNNNNN
      (docs/formats.md, format 2): the fp32 weights as they are, padded embedding rows included; the
      Adam moments and step; the step, tokens and data-loader position from OLMo-core's trainer
      state. RUN.yaml is the tandem config of the run that continues: its model section is the
      model's (tandem checks every shape when it loads) and its skip-step options seed the (empty)
      skip-step window, as OLMo-core's own resume starts with an empty window. A model-only DCP
      (no train/) imports as a stage start: use it with trainer.load_path. `tandem train RUN.yaml`
      with trainer.save_folder=RUN_DIR resumes from it; tandem verifies the manifest's checksums,
      the optimizer index and every tensor's shape before using it.

  export TANDEM_CKPT --out OLMO_CKPT [--config RUN.yaml]
      A tandem checkpoint (the manifest verified first) becomes an OLMo-core checkpoint: OLMo-core's
      own TransformerTrainModule (its model and SkipStepAdamW) is loaded with the weights and
      moments and saved by OLMo-core's Checkpointer, with a trainer state (step, tokens, data-loader
      position) that OLMo-core's Trainer resumes from. RUN.yaml (default: the run's config.yaml)
      gives the optimiser's hyperparameters.

Install: pip install ai2-olmo-core xxhash pyyaml   (ai2-olmo-core brings torch and safetensors)
"""
import argparse
import json
import os
import shutil
import sys
from importlib.metadata import version

import numpy as np
import torch
import xxhash
import yaml
from safetensors import safe_open
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from olmo_groups import group_overrides, torch_options  # noqa: E402
from olmo_schedulers import trainer_durations  # noqa: E402

FORMAT_VERSION = 2  # tandem's checkpoint format (src/tandem/train/checkpoint.cc)
INDEX_VERSION = 1   # optim/index.json (src/tandem/train/optimizer_shards.cc)


def die(msg):
    sys.exit(f"olmo_core_checkpoint: {msg}")


def load_yaml(path):
    with open(path) as f:
        return yaml.safe_load(f)


def xxh64_file(path):
    h = xxhash.xxh64(seed=0)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def step_dir_name(step):
    return f"step-{step:06d}"


# ----------------------------------------------------------------------------------------------
# import
class OlmoCheckpoint:
    """An OLMo-core checkpoint directory, read tensor group by tensor group (OLMo-core's
    load_keys unshards each), so that a 7B import never holds weights and moments at once."""

    def __init__(self, olmo_dir):
        from olmo_core.distributed.checkpoint import get_checkpoint_metadata

        self.dir = olmo_dir
        self.mo = os.path.join(olmo_dir, "model_and_optim")
        if not os.path.isdir(self.mo):
            if not os.path.exists(os.path.join(olmo_dir, ".metadata")):
                die(f"{olmo_dir}: neither model_and_optim/ nor a DCP .metadata: not an OLMo-core "
                    f"checkpoint")
            self.mo = olmo_dir  # model (and maybe optimizer) only, no trainer state
        self.meta = get_checkpoint_metadata(self.mo).state_dict_metadata
        self.names = [k[len("model."):] for k in sorted(self.meta) if k.startswith("model.")]
        if not self.names:
            die(f"{self.mo}: no model.* tensors in the checkpoint")
        self.has_optim = all(f"optim.state.{n}.exp_avg" in self.meta for n in self.names)
        rank0 = os.path.join(olmo_dir, "train", "rank0.pt")
        self.train_state = torch.load(rank0, weights_only=False) if os.path.exists(rank0) else None

    def load(self, keys):
        from olmo_core.distributed.checkpoint import load_keys

        return dict(zip(keys, load_keys(self.mo, keys)))

    def numel(self, name):
        return int(np.prod(list(self.meta[f"model.{name}"].size)))

    def weights(self):
        values = self.load([f"model.{n}" for n in self.names])
        return {n: values[f"model.{n}"] for n in self.names}

    def adam_step(self):
        values = self.load([f"optim.state.{n}.step" for n in self.names])
        steps = sorted({float(v) for v in values.values()})
        if len(steps) != 1:
            die(f"{self.mo}: parameters have different Adam steps {steps}; tandem keeps one")
        return int(steps[0])

    def moment_groups(self, max_bytes):
        """Parameter names in groups whose two fp32 moments take at most max_bytes (or one
        parameter, if it alone is larger)."""
        groups, size = [[]], 0
        for n in self.names:
            b = 8 * self.numel(n)
            if groups[-1] and size + b > max_bytes:
                groups.append([])
                size = 0
            groups[-1].append(n)
            size += b
        return groups

    def moments(self, names):
        keys = [f"optim.state.{n}.{m}" for n in names for m in ("exp_avg", "exp_avg_sq")]
        values = self.load(keys)
        return {n: (values[f"optim.state.{n}.exp_avg"], values[f"optim.state.{n}.exp_avg_sq"])
                for n in names}


def loader_state(olmo_loader):
    """OLMo-core's data-loader state_dict as tandem's loader state (the same fields)."""
    keep = ["dataset_fingerprint_version", "dataset_fingerprint", "batches_processed",
            "tokens_processed", "seed", "epoch", "dataset_type", "sequence_length",
            "max_target_sequence_length"]
    missing = [k for k in keep if k not in olmo_loader]
    if missing:
        die(f"the trainer state's data_loader lacks {missing}")
    return {k: olmo_loader[k] for k in keep}


def write_manifest(folder, step):
    files = {}
    for root, _, names in os.walk(folder):
        for n in names:
            p = os.path.join(root, n)
            rel = os.path.relpath(p, folder)
            files[rel] = {"bytes": os.path.getsize(p), "xxh64": xxh64_file(p)}
    manifest = {"format_version": FORMAT_VERSION, "step": step,
                "files": dict(sorted(files.items()))}
    with open(os.path.join(folder, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")


def write_moment_shards(ckpt, optim_dir, shapes, max_bytes):
    """The Adam moments as tandem's optimizer shards (whole tensors, a bounded size per shard) and
    their index.json; returns the Adam step."""
    adam_step = ckpt.adam_step()
    groups = ckpt.moment_groups(max_bytes)
    index = {}
    for i, names in enumerate(groups):
        file = f"shard-{i:05d}-of-{len(groups):05d}.safetensors"
        tensors, meta = {}, {"adam_step": str(adam_step), "shard": str(i),
                             "num_shards": str(len(groups))}
        for n, (m1, m2) in ckpt.moments(names).items():
            shape = shapes[n]
            if list(m1.shape) != shape or list(m2.shape) != shape:
                die(f"{ckpt.mo}: the moments of {n} are not of its shape {shape}")
            tensors[f"exp_avg.{n}"] = m1.float().reshape(-1).contiguous()
            tensors[f"exp_avg_sq.{n}"] = m2.float().reshape(-1).contiguous()
            meta[f"start.{n}"] = "0"
            meta[f"shape.{n}"] = json.dumps(shape, separators=(",", ":"))
            index[n] = {"shape": shape, "pieces": [{"file": file, "start": 0,
                                                    "length": int(np.prod(shape))}]}
        save_file(tensors, os.path.join(optim_dir, file), metadata=meta)
        del tensors
    with open(os.path.join(optim_dir, "index.json"), "w") as f:
        json.dump({"format_version": INDEX_VERSION, "num_shards": len(groups),
                   "adam_step": adam_step, "tensors": dict(sorted(index.items()))}, f, indent=1)
        f.write("\n")
    return adam_step


def import_checkpoint(olmo_dir, config_path, run_dir, shard_bytes=4 << 30):
    cfg = load_yaml(config_path)
    if "model" not in cfg:
        die(f"{config_path}: no model section")
    ckpt = OlmoCheckpoint(olmo_dir)
    train_state = ckpt.train_state
    step = int(train_state["global_step"]) if train_state else 0
    final = os.path.join(run_dir, "checkpoints", step_dir_name(step))
    tmp = os.path.join(run_dir, "checkpoints", f".{step_dir_name(step)}.partial")
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(os.path.join(tmp, "model"))

    with open(os.path.join(tmp, "model", "model.yaml"), "w") as f:
        yaml.safe_dump({"model": cfg["model"]}, f, sort_keys=False, default_flow_style=None)
    weights = ckpt.weights()
    for n, w in weights.items():
        if w.dtype != torch.float32:
            die(f"{olmo_dir}: model.{n} is {w.dtype}; an OLMo-core training checkpoint keeps "
                f"fp32 weights")
    shapes = {n: list(w.shape) for n, w in weights.items()}
    save_file({n: w.contiguous() for n, w in weights.items()},
              os.path.join(tmp, "model", "model.safetensors"),
              metadata={"tandem.source_dtype": "F32", "format": "pt"})
    del weights

    if ckpt.has_optim:
        os.makedirs(os.path.join(tmp, "optim"))
        write_moment_shards(ckpt, os.path.join(tmp, "optim"), shapes, shard_bytes)

    skip = cfg.get("optim") or {}  # rolling_interval_length, sigma_factor (docs/optimizer.md)
    state = {
        "step": step,
        "tokens": int(train_state["global_train_tokens_seen"]) if train_state else 0,
        "skipped_steps": 0, "nonfinite_steps": 0, "consecutive_nonfinite": 0,
        # OLMo-core keeps no skip-step history in its checkpoints: its resume starts empty too.
        "skip_step": {"rolling_interval_length": int(skip.get("rolling_interval_length", 128)),
                      "sigma_factor": float(skip.get("sigma_factor", 6)),
                      "losses": [], "grad_norms": [], "skipped_steps": 0},
        "world_size": 1,
        "config": config_path,
        "format_version": FORMAT_VERSION,
        "imported_from": {"olmo_core_checkpoint": os.path.basename(os.path.normpath(olmo_dir)),
                          "ai2-olmo-core": version("ai2-olmo-core"), "torch": version("torch")},
    }
    if train_state:
        state["loader"] = loader_state(train_state["data_loader"])
    with open(os.path.join(tmp, "state.json"), "w") as f:
        json.dump(state, f, indent=1)
        f.write("\n")
    write_manifest(tmp, step)  # last, as tandem does: a checkpoint with one is complete
    shutil.rmtree(final, ignore_errors=True)
    os.rename(tmp, final)
    return final


# ----------------------------------------------------------------------------------------------
# export
def verify_tandem_checkpoint(ckpt):
    path = os.path.join(ckpt, "manifest.json")
    if not os.path.exists(path):
        die(f"{ckpt}: no manifest.json (an incomplete checkpoint)")
    with open(path) as f:
        manifest = json.load(f)
    for rel, info in manifest["files"].items():
        p = os.path.join(ckpt, rel)
        if not os.path.exists(p):
            die(f"checkpoint file {p} is missing")
        if os.path.getsize(p) != info["bytes"]:
            die(f"checkpoint file {p} is {os.path.getsize(p)} bytes, manifest says {info['bytes']}")
        if xxh64_file(p) != info["xxh64"]:
            die(f"checkpoint file {p} fails its checksum")


def read_sharded(folder, index_path, names_of):
    """Whole tensors from the shards an index (model/shards.json, optim/index.json) names: for each
    indexed tensor, names_of(name) -> the names its pieces hold in each shard file."""
    with open(index_path) as f:
        index = json.load(f)
    out, opened = {}, {}
    for n, t in index["tensors"].items():
        numel = int(np.prod(t["shape"]))
        parts = [torch.empty(numel) for _ in names_of(n)]
        covered = 0
        for p in sorted(t["pieces"], key=lambda p: p["start"]):
            if p["start"] != covered:
                die(f"{index_path}: {n} is not stored contiguously")
            fh = opened.setdefault(p["file"], safe_open(
                os.path.join(folder, p["file"]), framework="pt"))
            for part, stored in zip(parts, names_of(n)):
                part[p["start"]:p["start"] + p["length"]] = fh.get_tensor(stored).float()
            covered += p["length"]
        if covered != numel:
            die(f"{index_path}: {n} covers {covered} of {numel} elements")
        out[n] = [part.reshape(t["shape"]) for part in parts]
    return out, index


def read_tandem_checkpoint(ckpt):
    verify_tandem_checkpoint(ckpt)
    model_cfg = load_yaml(os.path.join(ckpt, "model", "model.yaml"))["model"]
    weights = {}
    shards = os.path.join(ckpt, "model", "shards.json")
    if os.path.exists(shards):
        # Written by several ranks (ddp, zero1, fsdp at W > 1): each shard a range per tensor.
        read, _ = read_sharded(os.path.join(ckpt, "model"), shards, lambda n: [n])
        weights = {n: parts[0] for n, parts in read.items()}
    else:
        with safe_open(os.path.join(ckpt, "model", "model.safetensors"), framework="pt") as f:
            for n in f.keys():
                weights[n] = f.get_tensor(n).float()
    moments, adam_step = {}, None
    index_path = os.path.join(ckpt, "optim", "index.json")
    if os.path.exists(index_path):
        read, index = read_sharded(os.path.join(ckpt, "optim"), index_path,
                                   lambda n: [f"exp_avg.{n}", f"exp_avg_sq.{n}"])
        adam_step = int(index["adam_step"])
        moments = {n: (parts[0], parts[1]) for n, parts in read.items()}
    with open(os.path.join(ckpt, "state.json")) as f:
        state = json.load(f)
    return model_cfg, weights, moments, adam_step, state


def olmo_model_config(m):
    """OLMo-core's TransformerConfig for a tandem model section written by tandem (one window per
    layer, as save_tandem_model writes it)."""
    from olmo_core.nn.attention import AttentionBackendName, SlidingWindowAttentionConfig
    from olmo_core.nn.feed_forward import FeedForwardConfig
    from olmo_core.nn.transformer import TransformerBlockType, TransformerConfig

    n_layers = int(m["n_layers"])
    sliding = None
    sw = m.get("sliding_window")
    if sw:
        pattern = [int(w) for w in sw["pattern"]]
        if len(pattern) != n_layers or sw.get("force_full_attention_on_first_layer") or \
                sw.get("force_full_attention_on_last_layer"):
            die("export needs one window per layer in model.yaml (as tandem writes its "
                "checkpoints); this one has a repeating pattern")
        sliding = SlidingWindowAttentionConfig(pattern=pattern,
                                               force_full_attention_on_first_layer=False,
                                               force_full_attention_on_last_layer=False)
    if "embedding_size" not in m:
        die("model.yaml has no embedding_size (tandem writes it in its checkpoints)")
    return TransformerConfig.llama_like(
        d_model=int(m["d_model"]), vocab_size=int(m["embedding_size"]), n_layers=n_layers,
        n_heads=int(m["n_heads"]), n_kv_heads=int(m.get("n_kv_heads", m["n_heads"])),
        head_dim=int(m["head_dim"]) if "head_dim" in m else None,
        block_name=TransformerBlockType.reordered_norm, qk_norm=True,
        rope_theta=int(float(m.get("rope_theta", 500000))),
        layer_norm_eps=float(m.get("layer_norm_eps", 1e-6)),
        feed_forward=FeedForwardConfig(hidden_size=int(m["hidden_size"]), bias=False),
        attn_backend=AttentionBackendName.torch, sliding_window=sliding)


def max_steps(run_cfg):
    """OLMo-core's Trainer.max_steps of the run's duration (None for epochs: the data decides)."""
    try:
        return trainer_durations(run_cfg)[1]
    except ValueError:
        return None


def olmo_train_module(model_cfg, run_cfg):
    from olmo_core.optim import OptimGroupOverride, SkipStepAdamWConfig
    from olmo_core.train.train_module import TransformerTrainModuleConfig

    o = run_cfg.get("optim") or {}
    skip = o  # the skip-step keys sit in optim: (docs/optimizer.md)
    seq = int((run_cfg.get("data") or {}).get("sequence_length", 1))
    tm_cfg = TransformerTrainModuleConfig(
        rank_microbatch_size=seq, max_sequence_length=seq,
        optim=SkipStepAdamWConfig(
            lr=float(o.get("lr", 1e-3)), weight_decay=float(o.get("weight_decay", 0.1)),
            betas=tuple(float(b) for b in o.get("betas", [0.9, 0.95])),
            eps=float(o.get("eps", 1e-8)),
            rolling_interval_length=int(skip.get("rolling_interval_length", 128)),
            sigma_factor=skip.get("sigma_factor", 6),
            group_overrides=[OptimGroupOverride(params=g["params"], opts=torch_options(g["opts"]))
                             for g in group_overrides(o)]),
        z_loss_multiplier=o.get("z_loss_multiplier", 1e-5),
        max_grad_norm=o.get("max_grad_norm", 1.0))
    model = model_cfg.build(init_device="cpu")
    return tm_cfg.build(model, device=torch.device("cpu"))


def set_state(train_module, weights, moments, adam_step):
    """tandem's values into OLMo-core's model and optimizer, as OLMo-core's optimizer keeps them
    (per-parameter step, exp_avg, exp_avg_sq)."""
    model = train_module.model
    missing = set(model.state_dict()) ^ set(weights)
    if missing:
        die(f"the checkpoint's tensors and OLMo-core's model differ in {sorted(missing)[:5]}")
    model.load_state_dict(weights, strict=True)
    if moments:
        opt = train_module.optim
        by_param = {p: n for n, p in model.named_parameters()}
        for group in opt.param_groups:
            for p in group["params"]:
                m1, m2 = moments[by_param[p]]
                opt.state[p] = {"step": torch.tensor(float(adam_step), dtype=torch.float32),
                                "exp_avg": m1.clone(), "exp_avg_sq": m2.clone()}


def export_checkpoint(ckpt, out_dir, config_path=None):
    from olmo_core.train.checkpoint import Checkpointer
    from olmo_core.train.utils import EnvRngStates

    model_section, weights, moments, adam_step, state = read_tandem_checkpoint(ckpt)
    if config_path is None:
        config_path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(ckpt))),
                                   "config.yaml")
    run_cfg = load_yaml(config_path)
    tm = olmo_train_module(olmo_model_config(model_section), run_cfg)
    set_state(tm, weights, moments, adam_step)
    train_state = {
        "global_step": int(state["step"]), "global_train_tokens_seen": int(state["tokens"]),
        "global_train_petaflops": 0.0,
        "max_steps": max_steps(run_cfg),
        "epoch": int(state["loader"]["epoch"]) if "loader" in state else 1,
        "world_size": 1, "rng": EnvRngStates.current_state().as_dict(), "callbacks": {}}
    if "loader" in state:
        train_state["data_loader"] = loader_state(state["loader"])
    shutil.rmtree(out_dir, ignore_errors=True)
    work = out_dir.rstrip("/") + ".work"
    Checkpointer(work_dir=work, save_overwrite=True).save(out_dir, tm, train_state)
    shutil.rmtree(work, ignore_errors=True)
    return out_dir


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    imp = sub.add_parser("import", help="OLMo-core checkpoint -> tandem checkpoint")
    imp.add_argument("olmo_checkpoint")
    imp.add_argument("--config", required=True, help="tandem config of the continuing run")
    imp.add_argument("--run-dir", required=True,
                     help="tandem run directory; the checkpoint goes to checkpoints/step-NNNNNN")
    imp.add_argument("--shard-gib", type=float, default=4.0,
                     help="at most this many GiB of Adam moments per optimizer shard file "
                          "(bounds the memory the import needs beyond the weights)")
    exp = sub.add_parser("export", help="tandem checkpoint -> OLMo-core checkpoint")
    exp.add_argument("tandem_checkpoint")
    exp.add_argument("--out", required=True)
    exp.add_argument("--config", default=None, help="tandem run config (optimiser settings)")
    a = ap.parse_args()
    if a.cmd == "import":
        print(import_checkpoint(a.olmo_checkpoint, a.config, a.run_dir,
                                int(a.shard_gib * (1 << 30))))
    else:
        print(export_checkpoint(a.tandem_checkpoint, a.out, a.config))


if __name__ == "__main__":
    main()
