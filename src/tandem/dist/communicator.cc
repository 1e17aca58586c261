#include "tandem/dist/communicator.h"

#include "tandem/dist/mpi_communicator.h"

#include <fmt/format.h>

#include <cstdlib>

namespace tandem {

void SingleProcessCommunicator::abort(const std::string& message, int code) {
  fmt::print(stderr, "tandem: {}\n", message);
  std::exit(code);
}

std::unique_ptr<Communicator> make_communicator() {
  if (launched_under_mpi()) return std::make_unique<MpiCommunicator>();
  return std::make_unique<SingleProcessCommunicator>();
}

}  // namespace tandem
