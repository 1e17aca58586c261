// `tandem train CONFIG.yaml [key=value ...]`: trains (or resumes) the run the config describes.
#include <fmt/format.h>

#include "tandem/cli/commands.h"
#include "tandem/dist/communicator.h"
#include "tandem/train/stop_signals.h"
#include "tandem/train/trainer.h"

namespace tandem::cli {

void add_train_command(CLI::App& app, int& exit_code) {
  auto config = std::make_shared<std::string>();
  auto overrides = std::make_shared<std::vector<std::string>>();
  CLI::App* cmd = app.add_subcommand("train", "Train (or resume) the run described by a config");
  cmd->add_option("config", *config, "Run config (YAML)")->required();
  cmd->add_option("overrides", *overrides, "key=value overrides, e.g. trainer.max_steps=10");
  cmd->callback([config, overrides, &exit_code] {
    // First, before any thread starts (train/stop_signals.h says why).
    train::install_stop_signal_handlers();
    train::RunConfig run = train::load_run_config(*config, *overrides);
    auto comm = dist::make_communicator();
    try {
      train::Trainer trainer(std::move(run), *comm);
      exit_code = trainer.run();
    } catch (const std::exception& e) {
      // Under MPI the other ranks would wait for this one forever: end the whole job.
      if (comm->world_size() > 1) comm->abort(fmt::format("error: {}", e.what()), 1);
      throw;
    }
  });
}

}  // namespace tandem::cli
