// The `tandem` command: parses the subcommand and reports errors as one clear line.
#include <fmt/format.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <new>

#include "tandem/cli/commands.h"
#include "tandem/core/error.h"

namespace {

// The data keeps one descriptor per distinct token file, and AI2's mixes list thousands of files
// (OLMo-midtraining-mix-0925-ingredient1-100B: 12,252) while shells often start with a soft limit
// of 1024: take the hard limit, as a process may without privileges.
void raise_open_file_limit() {
  struct rlimit lim {};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur >= lim.rlim_max) return;
  lim.rlim_cur = lim.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &lim);  // best effort: a failure leaves the old limit
}

}  // namespace

int main(int argc, char** argv) {
  raise_open_file_limit();
  CLI::App app{"tandem: trains OLMo-family models and proves parity with the reference recipe"};
  app.require_subcommand(1);
  int exit_code = 0;
  tandem::cli::add_parity_command(app, exit_code);
  tandem::cli::add_convert_command(app, exit_code);
  tandem::cli::add_train_command(app, exit_code);
  tandem::cli::add_eval_command(app, exit_code);
  tandem::cli::add_compare_command(app, exit_code);
  tandem::cli::add_plan_command(app, exit_code);
  CLI::App* data = app.add_subcommand("data", "Tokenize, inspect, batch and audit training data");
  data->require_subcommand(1);
  tandem::cli::add_data_tokenize_command(*data, exit_code);
  tandem::cli::add_data_inspect_command(*data, exit_code);
  tandem::cli::add_data_batches_command(*data, exit_code);
  tandem::cli::add_data_audit_command(*data, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const tandem::core::OutOfMemory& e) {
    // Said here, where the shortage ends the run (a fallback that catches it says nothing).
    fmt::print(stderr,
               "tandem: error: {}\n(`tandem plan CONFIG --device ...` shows what a run needs per "
               "device and which strategies fit)\n",
               e.what());
    return 1;
  } catch (const tandem::core::Error& e) {
    fmt::print(stderr, "tandem: error: {}\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    // Inputs are checked before sizes taken from them are allocated; what is left is a run
    // too large for this machine's memory.
    fmt::print(stderr,
               "tandem: error: out of memory (the model, batch or data is too large for this "
               "machine; check the sizes in the config)\n");
    return 1;
  } catch (const std::filesystem::filesystem_error& e) {
    fmt::print(stderr, "tandem: error: {}\n", e.what());  // names the path(s) and the reason
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "tandem: unexpected error: {}\n", e.what());
    return 1;
  }
  return exit_code;
}
