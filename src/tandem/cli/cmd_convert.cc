// Placeholder registration until the command is implemented; it refuses to run.
#include "tandem/cli/commands.h"
#include "tandem/core/error.h"

namespace tandem::cli {

void add_convert_command(CLI::App& app, int& exit_code) {
  CLI::App* cmd = app.add_subcommand("convert", "(not yet implemented)");
  cmd->callback([&exit_code] { fail("'convert' is not implemented yet"); });
}

}  // namespace tandem::cli
