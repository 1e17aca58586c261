#include "tandem/dist/communicator.h"

#include <fmt/format.h>

#include <cstdlib>

namespace tandem {

void SingleProcessCommunicator::abort(const std::string& message, int code) {
  fmt::print(stderr, "tandem: {}\n", message);
  std::exit(code);
}

std::unique_ptr<Communicator> make_communicator() {
  return std::make_unique<SingleProcessCommunicator>();
}

}  // namespace tandem
