// Placeholder registration until the command is implemented; it refuses to run.
#include "tandem/cli/commands.h"
#include "tandem/core/error.h"

namespace tandem::cli {

void add_data_inspect_command(CLI::App& data, int& exit_code) {
  CLI::App* cmd = data.add_subcommand("inspect", "(not yet implemented)");
  cmd->callback([&exit_code] { fail("'inspect' is not implemented yet"); });
}

}  // namespace tandem::cli
