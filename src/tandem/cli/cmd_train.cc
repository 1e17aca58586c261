// Placeholder registration until the command is implemented; it refuses to run.
#include "tandem/cli/commands.h"
#include "tandem/core/error.h"

namespace tandem::cli {

void add_train_command(CLI::App& app, int& exit_code) {
  CLI::App* cmd = app.add_subcommand("train", "(not yet implemented)");
  cmd->allow_extras();
  cmd->callback([&exit_code] { fail("'train' is not implemented yet"); });
}

}  // namespace tandem::cli
