#include "tandem/dist/communicator.h"

#include <fmt/format.h>

#include <cstdlib>
#include <string>

#include "tandem/core/error.h"
#include "tandem/dist/mpi_communicator.h"
#ifdef TANDEM_HAVE_NCCL
#include "tandem/dist/nccl_communicator.h"
#endif

namespace tandem::dist {

namespace {

// Processes the launcher started, when it says (OpenMPI and PMI do; PMIx has no such variable).
int launcher_world_size() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"})
    if (const char* v = std::getenv(var)) return std::atoi(v);
  return 0;
}

std::unique_ptr<Communicator> make_nccl_communicator() {
#ifdef TANDEM_HAVE_NCCL
  std::string why;
  TANDEM_CHECK(cuda_device_count(&why) > 0,
               "TANDEM_COMMUNICATOR=nccl: no usable CUDA device on this machine ({})", why);
  return std::make_unique<NcclCommunicator>();
#else
  core::fail(
      "TANDEM_COMMUNICATOR=nccl: this tandem was built without NCCL (CMake found no CUDA toolkit "
      "with NCCL, or TANDEM_WITH_NCCL was OFF); use mpi, or rebuild on a machine with both");
#endif
}

}  // namespace

void Communicator::all_gather_bytes(void*, const std::size_t*, std::size_t) {
  core::fail(
      "the {} communicator has no all-gather of bf16 values (needed by dist.strategy "
      "fsdp/hsdp under precision bf16)",
      name());
}

void Communicator::start_all_reduce_sum_device(float*, std::size_t, void*) {
  core::fail(
      "the {} communicator reduces host memory only (TANDEM_COMMUNICATOR=nccl reduces a "
      "GPU backend's gradients)",
      name());
}

void Communicator::start_reduce_scatter_sum_device(float*, const std::size_t*, std::size_t,
                                                   std::size_t, void*) {
  core::fail("the {} communicator reduces host memory only", name());
}

void Communicator::start_all_gather_device(void*, const std::size_t*, std::size_t, void*) {
  core::fail("the {} communicator gathers host memory only", name());
}

Communicator::DeviceMark Communicator::mark_device_collectives() {
  core::fail("the {} communicator has no device collectives", name());
}

void Communicator::order_after_device_collectives(DeviceMark, void*) {
  core::fail("the {} communicator has no device collectives", name());
}

void Communicator::finish_device_collectives(void*) {
  core::fail("the {} communicator reduces host memory only", name());
}

void Communicator::all_gather_device(float*, const std::size_t*, void*) {
  core::fail("the {} communicator gathers host memory only", name());
}

std::unique_ptr<Communicator> Communicator::split(int, int) {
  core::fail("the {} communicator cannot be split into groups (needed by dist.strategy fsdp/hsdp)",
             name());
}

void SingleProcessCommunicator::abort(const std::string& message, int code) {
  fmt::print(stderr, "tandem: {}\n", message);
  std::exit(code);
}

std::unique_ptr<Communicator> make_communicator() {
  const char* forced = std::getenv("TANDEM_COMMUNICATOR");
  const std::string choice = forced != nullptr ? forced : "";
  if (choice.empty()) {
    if (launched_under_mpi()) return std::make_unique<MpiCommunicator>();
    return std::make_unique<SingleProcessCommunicator>();
  }
  if (choice == "nccl") return make_nccl_communicator();
  if (choice == "mpi") return std::make_unique<MpiCommunicator>();
  if (choice == "single") {
    // Every rank would train alone and write the same run directory.
    TANDEM_CHECK(launcher_world_size() <= 1,
                 "TANDEM_COMMUNICATOR=single, but the launcher started {} processes",
                 launcher_world_size());
    return std::make_unique<SingleProcessCommunicator>();
  }
  core::fail("TANDEM_COMMUNICATOR={}: expected nccl, mpi or single (or unset for the default)",
             choice);
}

}  // namespace tandem::dist
