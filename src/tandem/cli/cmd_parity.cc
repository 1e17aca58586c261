// Placeholder registration until the command is implemented; it refuses to run.
#include "tandem/cli/commands.h"
#include "tandem/core/error.h"

namespace tandem::cli {

void add_parity_command(CLI::App& app, int& exit_code) {
  CLI::App* cmd = app.add_subcommand("parity", "(not yet implemented)");
  cmd->callback([&exit_code] { fail("'parity' is not implemented yet"); });
}

}  // namespace tandem::cli
