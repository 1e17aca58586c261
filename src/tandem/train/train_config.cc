#include "tandem/train/train_config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>

#include "tandem/core/error.h"
#include "tandem/core/glob.h"

namespace fs = std::filesystem;

namespace tandem::train {
namespace {

// OLMo-core's Duration {value, unit: steps|tokens|epochs}.
Duration read_duration(io::ConfigSection& s, const std::string& key) {
  io::ConfigSection d = s.section(key);
  const std::string unit = d.get_string("unit");
  TANDEM_CHECK(unit == "steps" || unit == "tokens" || unit == "epochs",
               "{}: unit '{}' (expected steps, tokens or epochs)", d.where("unit"), unit);
  // YAML reads 1e11 as a float: an integral value that fits is accepted too.
  const double v = d.get_double("value");
  TANDEM_CHECK(v >= 1 && v <= 9.0e15 && std::floor(v) == v,
               "{} must be a whole number >= 1, got {}", d.where("value"), v);
  d.finish();
  return {static_cast<std::int64_t>(v), unit == "steps"    ? Duration::Unit::kSteps
                                        : unit == "tokens" ? Duration::Unit::kTokens
                                                           : Duration::Unit::kEpochs};
}

TrainerConfig parse_trainer(io::ConfigSection s, const std::string& base_dir,
                            std::int64_t batch_tokens) {
  TrainerConfig t;
  t.save_folder = io::resolve_config_path(base_dir, s.get_string("save_folder"));
  // OLMo-core's max_duration, or max_steps for a duration in steps.
  TANDEM_CHECK(s.has("max_steps") != s.has("max_duration"),
               "{}: give max_steps or max_duration ({{value, unit: steps|tokens|epochs}}), one of "
               "them",
               s.where(""));
  if (s.has("max_steps")) {
    t.max_duration = {s.get_int("max_steps"), Duration::Unit::kSteps};
    TANDEM_CHECK(t.max_duration.value > 0, "{} must be positive", s.where("max_steps"));
  } else {
    t.max_duration = read_duration(s, "max_duration");
  }
  s.mark_used("max_steps");
  s.mark_used("max_duration");
  // OLMo-core's hard_stop: the run ends there when it comes first; the schedule keeps its horizon.
  if (s.has("hard_stop")) t.hard_stop = read_duration(s, "hard_stop");
  s.mark_used("hard_stop");
  if (!t.needs_batches_per_epoch()) t.resolve_durations(batch_tokens, 0);
  t.save_interval = s.get_int("save_interval", 0);
  t.keep_last = s.get_int("keep_last", 3);
  TANDEM_CHECK(t.keep_last >= 1, "{} must be at least 1", s.where("keep_last"));
  TANDEM_CHECK(t.save_interval >= 0, "{} must be >= 0 (0: only at the end)",
               s.where("save_interval"));
  t.ephemeral_save_interval = s.get_int("ephemeral_save_interval", 0);
  TANDEM_CHECK(t.ephemeral_save_interval >= 0, "{} must be >= 0 (0: none)",
               s.where("ephemeral_save_interval"));
  // As OLMo-core: ephemeral checkpoints come between the kept ones, so more often.
  TANDEM_CHECK(t.ephemeral_save_interval == 0 || t.save_interval == 0 ||
                   t.ephemeral_save_interval < t.save_interval,
               "{} ({}) must be less than save_interval ({})", s.where("ephemeral_save_interval"),
               t.ephemeral_save_interval, t.save_interval);
  t.log_interval = std::max<std::int64_t>(1, s.get_int("log_interval", 1));
  t.init_seed = static_cast<std::uint64_t>(s.get_int("seed", 0));
  t.init_from = io::resolve_config_path(base_dir, s.get_string("init_from", ""));
  t.load_path = io::resolve_config_path(base_dir, s.get_string("load_path", ""));
  TANDEM_CHECK(t.init_from.empty() || t.load_path.empty(),
               "{}: give init_from or load_path, not both", s.where(""));
  t.load_optimizer_state = s.get_bool("load_optimizer_state", true);
  t.max_consecutive_nonfinite = s.get_int("max_consecutive_nonfinite", 5);
  TANDEM_CHECK(t.max_consecutive_nonfinite >= 1, "{} must be at least 1",
               s.where("max_consecutive_nonfinite"));
  if (s.has("peak_tflops")) {
    t.peak_tflops = s.get_double("peak_tflops");
    TANDEM_CHECK(*t.peak_tflops > 0, "{} must be > 0", s.where("peak_tflops"));
  } else {
    s.mark_used("peak_tflops");
  }
  t.save_initial = s.get_bool("save_initial", false);
  t.progress = s.get_bool("progress", true);
  t.fresh_start = s.get_bool("fresh_start", false);
  t.recompute = model::parse_recompute(s.get_string("recompute", "none"), s.where("recompute"));
  t.profile_step = s.get_int("profile_step", 0);
  TANDEM_CHECK(t.profile_step >= 0, "{} must be a step (>= 1) or 0 for none",
               s.where("profile_step"));
  s.finish();
  return t;
}

EvalConfig parse_eval(io::ConfigSection s, const std::string& base_dir,
                      const std::vector<std::string>& train_files) {
  EvalConfig e;
  e.interval = s.get_int("interval", 0);
  e.max_instances = s.get_int("max_instances", e.max_instances);
  e.batch_instances = s.get_int("batch_instances", e.batch_instances);
  TANDEM_CHECK(e.max_instances > 0 && e.batch_instances > 0,
               "{}: max_instances and batch_instances must be positive", s.where(""));
  std::set<std::string> training;
  for (const auto& f : train_files) training.insert(fs::weakly_canonical(f).string());
  if (s.has("sets")) {
    YAML::Node sets = s.raw("sets");
    TANDEM_CHECK(sets.IsSequence(), "{} must be a list of {{name, paths}}", s.where("sets"));
    for (std::size_t i = 0; i < sets.size(); ++i) {
      io::ConfigSection set(sets[i], s.path() + ".sets[" + std::to_string(i) + "]");
      HeldoutSetConfig h;
      h.name = set.get_string("name");
      for (const auto& pattern : set.get_string_list("paths")) {
        std::string p = io::resolve_config_path(base_dir, pattern);
        std::vector<std::string> matched = core::expand_glob(p);
        TANDEM_CHECK(!matched.empty(), "{}: '{}' matches no file", set.where("paths"), pattern);
        for (const auto& f : matched) {
          // Held-out data must never be trained on: refuse the overlap outright.
          TANDEM_CHECK(!training.count(fs::weakly_canonical(f).string()),
                       "{}: validation file {} is also a training file", set.where("paths"), f);
          h.files.push_back(f);
        }
      }
      set.finish();
      e.sets.push_back(std::move(h));
    }
  } else {
    s.mark_used("sets");
  }
  if (s.has("padded")) {
    e.padded = eval::parse_padded_heldout_config(s.section("padded"), base_dir);
    for (const auto& set : e.padded->sets) {
      for (const auto& f : set.files) {
        TANDEM_CHECK(!training.count(fs::weakly_canonical(f).string()),
                     "{}: validation file {} is also a training file", s.where("padded"), f);
      }
    }
  } else {
    s.mark_used("padded");
  }
  if (s.has("downstream") && !s.raw("downstream").IsNull()) {
    e.downstream = eval::parse_downstream_config(s.section("downstream"));
    // Relative to the config's folder, as every other path of a run config.
    for (std::string* p : {&e.downstream->tokenizer, &e.downstream->options.tasks_dir,
                           &e.downstream->options.hf_datasets_dir})
      *p = io::resolve_config_path(base_dir, *p);
  } else {
    s.mark_used("downstream");
  }
  e.on_startup = s.get_bool("on_startup", false);
  TANDEM_CHECK(!e.on_startup || !e.sets.empty() || e.padded || e.downstream,
               "{}: nothing to evaluate at startup (no sets, padded or downstream)",
               s.where("on_startup"));
  s.finish();
  return e;
}

}  // namespace

bool TrainerConfig::needs_batches_per_epoch() const {
  return max_duration.unit == Duration::Unit::kEpochs ||
         (hard_stop && hard_stop->unit == Duration::Unit::kEpochs);
}

std::int64_t Duration::due_step(std::int64_t batch_tokens, std::int64_t batches_per_epoch) const {
  switch (unit) {
    case Unit::kSteps:
      return value;
    case Unit::kTokens:  // due once the tokens seen reach it
      return (value + batch_tokens - 1) / batch_tokens;
    case Unit::kEpochs: {  // due once the epoch's last batch is done
      TANDEM_CHECK(batches_per_epoch > 0,
                   "a duration in epochs needs the data's batches per epoch");
      std::int64_t steps = 0;
      TANDEM_CHECK(!__builtin_mul_overflow(value, batches_per_epoch, &steps),
                   "a duration of {} epochs of {} batches is beyond counting", value,
                   batches_per_epoch);
      return steps;
    }
  }
  return value;
}

void TrainerConfig::resolve_durations(std::int64_t batch_tokens, std::int64_t batches_per_epoch) {
  TANDEM_CHECK(batch_tokens > 0, "trainer: the global batch holds no tokens");
  const std::int64_t steps = max_duration.due_step(batch_tokens, batches_per_epoch);
  // OLMo-core's Trainer.max_tokens: the duration's tokens, or its steps' batches.
  std::int64_t tokens = max_duration.value;
  if (max_duration.unit != Duration::Unit::kTokens)
    TANDEM_CHECK(!__builtin_mul_overflow(steps, batch_tokens, &tokens),
                 "trainer: {} steps of {} tokens are beyond counting", steps, batch_tokens);
  horizon = {steps, tokens, batch_tokens};
  max_steps = steps;
  if (hard_stop)
    max_steps = std::min(max_steps, hard_stop->due_step(batch_tokens, batches_per_epoch));
}

RunConfig load_run_config(const std::string& path, const std::vector<std::string>& overrides) {
  RunConfig r;
  r.source = path;
  YAML::Node root = io::load_yaml_config(path, overrides);
  r.resolved = YAML::Clone(root);
  const std::string base_dir = fs::path(path).parent_path().string();
  io::ConfigSection top(root, "", path);
  top.get_string("run_name", "");
  r.backend = top.get_string("backend", "cpu");
  r.precision = model::parse_precision(top.get_string("precision", "fp32"));
  r.model = model::parse_model_config(top.section("model"));
  r.data = data::parse_data_config(top.section("data"), base_dir);
  TANDEM_CHECK(r.data.vocab_size <= r.model.vocab_size,
               "{}: data.vocab_size ({}) exceeds model.vocab_size ({})", path, r.data.vocab_size,
               r.model.vocab_size);
  TANDEM_CHECK(r.model.accepts_sequence_length(r.data.sequence_length),
               "{}: data.sequence_length ({}) exceeds model.max_sequence_length ({})", path,
               r.data.sequence_length, r.model.max_sequence_length);
  r.optim = optim::read_optim_config(top.section("optim"));
  r.schedule_yaml = YAML::Clone(root["scheduler"]);
  r.schedule = optim::make_schedule(top.section("scheduler"));
  r.dist = dist::read_dist_config(top.section("dist"));
  r.trainer = parse_trainer(top.section("trainer"), base_dir, r.data.global_batch_size);
  r.eval = parse_eval(top.section("evaluation"), base_dir, r.data.all_files());
  // A run's downstream queries are cut to its training sequence length unless max_length says
  // otherwise, as OLMo-core's DownstreamEvaluatorCallback cuts them to the train module's
  // max_sequence_length (the padded held-out sets take the same length).
  if (r.eval.downstream && r.eval.downstream->options.max_length == 0)
    r.eval.downstream->options.max_length = r.data.sequence_length;
  if (r.eval.padded && r.eval.padded->sequence_length > 0) {
    TANDEM_CHECK(r.eval.padded->sequence_length <= r.model.max_sequence_length,
                 "{}: evaluation.padded.sequence_length ({}) exceeds model.max_sequence_length "
                 "({})",
                 path, r.eval.padded->sequence_length, r.model.max_sequence_length);
  }
  top.finish();
  return r;
}

}  // namespace tandem::train
