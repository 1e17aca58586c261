// Each subcommand lives in its own file and registers itself on the CLI11 app here.
// A command's callback stores its process exit code in `exit_code` (0 = success) and throws
// tandem::core::Error for bad input; main() prints the message and exits non-zero.
#pragma once

#include <CLI/CLI.hpp>

namespace tandem::cli {

void add_parity_command(CLI::App& app, int& exit_code);
void add_convert_command(CLI::App& app, int& exit_code);
void add_train_command(CLI::App& app, int& exit_code);
void add_eval_command(CLI::App& app, int& exit_code);
void add_compare_command(CLI::App& app, int& exit_code);
void add_plan_command(CLI::App& app, int& exit_code);
// Under `tandem data`:
void add_data_tokenize_command(CLI::App& data, int& exit_code);
void add_data_inspect_command(CLI::App& data, int& exit_code);
void add_data_batches_command(CLI::App& data, int& exit_code);
void add_data_audit_command(CLI::App& data, int& exit_code);

}  // namespace tandem::cli
