// `tandem data batches CONFIG.yaml [key=value ...]`: prints, one JSON line per (step, rank), the
// global instance ids each rank gets, for a world size, a range of steps and a resume point; with
// --tokens also the token ids themselves (and the filter's instance mask), so that anyone can
// recompute a batch without tandem.
#include <fmt/format.h>

#include <memory>
#include <nlohmann/json.hpp>

#include "tandem/cli/commands.h"
#include "tandem/core/error.h"
#include "tandem/core/hash.h"
#include "tandem/data/data_config.h"
#include "tandem/data/loader.h"
#include "tandem/model/documents.h"

namespace tandem::cli {
namespace {

struct BatchesArgs {
  std::string config;
  std::vector<std::string> overrides;
  std::uint64_t world_size = 1;
  std::int64_t rank = -1;  // -1: every rank
  std::uint64_t from_step = 0;
  std::int64_t steps = -1;  // -1: to the end of the epoch of from_step
  bool hash = false;
  bool tokens = false;
  std::string resume_state;
  std::string save_state;
};

void run_batches(const BatchesArgs& a) {
  data::DataConfig config = data::load_data_config(a.config, a.overrides);
  auto dataset = std::make_shared<const data::TokenDataset>(config);
  data::check_rank(config, a.rank < 0 ? 0 : static_cast<std::uint64_t>(a.rank), a.world_size);

  data::LoaderOptions opts;
  opts.read_tokens = a.hash || a.tokens;
  std::vector<std::uint64_t> ranks;
  if (a.rank >= 0) {
    ranks.push_back(static_cast<std::uint64_t>(a.rank));
  } else {
    for (std::uint64_t r = 0; r < a.world_size; ++r) ranks.push_back(r);
  }
  std::vector<std::unique_ptr<data::Loader>> loaders;
  for (std::size_t i = 0; i < ranks.size(); ++i)
    loaders.push_back(std::make_unique<data::Loader>(config, dataset, opts));
  const std::uint64_t per_epoch = loaders[0]->batches_per_epoch();

  // Start position: a saved state, else the beginning; then --from-step counts from there.
  data::LoaderState start = loaders[0]->state();
  if (!a.resume_state.empty()) start = data::LoaderState::read(a.resume_state);
  for (auto& l : loaders) l->restore(start);
  data::LoaderState resumed = loaders[0]->state();
  std::uint64_t step = (resumed.epoch - 1) * per_epoch + resumed.batches_processed;
  if (a.from_step > 0) {
    TANDEM_CHECK(a.resume_state.empty() || a.from_step >= step,
                 "--from-step {} is before the resumed state's step {}", a.from_step, step);
    step = a.from_step;
    data::LoaderState at = resumed;
    at.epoch = 1 + step / per_epoch;
    at.batches_processed = step % per_epoch;
    at.tokens_processed =
        at.batches_processed * static_cast<std::uint64_t>(config.global_batch_size);
    for (auto& l : loaders) l->restore(at);
  }
  std::uint64_t steps =
      a.steps >= 0 ? static_cast<std::uint64_t>(a.steps) : per_epoch - step % per_epoch;
  for (std::uint64_t s = 0; s < steps; ++s, ++step) {
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      data::Batch b = loaders[i]->next_batch(ranks[i], a.world_size);
      nlohmann::ordered_json line;
      line["step"] = step;
      line["rank"] = ranks[i];
      line["instances"] = b.instance_ids;
      if (a.hash) {
        auto bytes =
            std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(b.input_ids.data()),
                                          b.input_ids.size() * sizeof(std::int64_t));
        line["tokens_xxh64"] = core::to_hex64(core::xxh64(bytes));
      }
      if (a.tokens) {
        // One row of sequence_length ids per instance, in the order of "instances".
        nlohmann::json rows = nlohmann::json::array();
        const auto T = static_cast<std::size_t>(b.sequence_length);
        for (std::size_t k = 0; k < b.num_instances(); ++k)
          rows.push_back(std::vector<std::int64_t>(
              b.input_ids.begin() + static_cast<std::ptrdiff_t>(k * T),
              b.input_ids.begin() + static_cast<std::ptrdiff_t>((k + 1) * T)));
        line["input_ids"] = std::move(rows);
        // 1 = kept, 0 = rejected by the repetition filter (all its labels are ignored).
        if (config.instance_filter) line["instance_mask"] = b.instance_mask;
        // Per token, 0 = its label is ignored (packed padding, label_mask_paths); only for data
        // that has such masks.
        if (!b.label_mask.empty()) {
          nlohmann::json masks = nlohmann::json::array();
          for (std::size_t k = 0; k < b.num_instances(); ++k)
            masks.push_back(
                std::vector<int>(b.label_mask.begin() + static_cast<std::ptrdiff_t>(k * T),
                                 b.label_mask.begin() + static_cast<std::ptrdiff_t>((k + 1) * T)));
          line["label_mask"] = std::move(masks);
        }
        // generate_doc_lengths: each instance's documents as the training step attends within
        // them (OLMo-core's doc_lens): the loader's for metadata boundaries, else a scan.
        if (config.generate_doc_lengths) {
          const std::vector<std::int64_t> starts =
              !b.document_starts.empty()
                  ? b.document_starts
                  : model::document_starts(
                        b.input_ids.data(), static_cast<std::int64_t>(b.num_instances()),
                        static_cast<std::int64_t>(T), config.eos_token_id, config.bos_token_id);
          nlohmann::json lens = nlohmann::json::array();
          for (std::size_t k = 0; k < b.num_instances(); ++k)
            lens.push_back(model::document_lengths(starts, static_cast<std::int64_t>(k),
                                                   static_cast<std::int64_t>(T)));
          line["doc_lens"] = std::move(lens);
        }
      }
      fmt::print("{}\n", line.dump());
    }
  }
  std::fflush(stdout);
  if (!a.save_state.empty()) loaders[0]->state().write(a.save_state);
}

}  // namespace

void add_data_batches_command(CLI::App& data, int& exit_code) {
  auto args = std::make_shared<BatchesArgs>();
  CLI::App* cmd = data.add_subcommand(
      "batches", "Print the global instance ids each rank gets, one JSON line per (step, rank)");
  cmd->add_option("config", args->config, "YAML config with a data: mapping")->required();
  cmd->add_option("overrides", args->overrides, "key=value overrides, e.g. data.seed=7");
  cmd->add_option("--world-size", args->world_size, "data-parallel world size")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--rank", args->rank, "only this rank (default: every rank)");
  cmd->add_option("--from-step", args->from_step, "first global step (counting across epochs)");
  cmd->add_option("--steps", args->steps, "number of steps (default: to the end of the epoch)");
  cmd->add_flag("--hash", args->hash, "add tokens_xxh64, the XXH64 of the int64 input ids");
  cmd->add_flag("--tokens", args->tokens,
                "add input_ids (one row of token ids per instance), with the repetition "
                "filter on instance_mask, for packed or masked data label_mask, and with "
                "generate_doc_lengths doc_lens");
  cmd->add_option("--resume-state", args->resume_state, "loader state JSON to resume from");
  cmd->add_option("--save-state", args->save_state, "write rank 0's loader state here at the end");
  cmd->callback([args, &exit_code] {
    run_batches(*args);
    exit_code = 0;
  });
}

}  // namespace tandem::cli
