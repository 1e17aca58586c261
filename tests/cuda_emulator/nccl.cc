// The CUDA emulator's NCCL (include/nccl.h) over MPI: a communicator is a duplicate of
// MPI_COMM_WORLD (or an MPI_Comm_split of its parent's, for ncclCommSplit), each collective the MPI
// collective of the same meaning, queued on the call's stream and run when that stream runs
// (streams.cc), so the buffers are read and written in stream order, as on a GPU. Every rank
// synchronises its streams in the same order, so the MPI collectives match as NCCL's would. A
// misuse that NCCL would reject or that would corrupt memory on a GPU (a host buffer, a count that
// does not fit the buffer's allocation, an unsupported type or operation) returns an error and says
// why on stderr, with the message ncclGetLastError gives.
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>
#include <nccl.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "emulator_state.h"

struct ncclComm {
  MPI_Comm mpi = MPI_COMM_NULL;
  int rank = 0, size = 0;
  std::atomic<int> async_error{ncclSuccess};  // a queued collective's failure, when it ran
};

namespace {

thread_local std::string t_last_error;

ncclResult_t fail(ncclResult_t rc, const std::string& why) {
  t_last_error = "NCCL emulator: " + why;
  std::fprintf(stderr, "%s\n", t_last_error.c_str());
  return rc;
}

std::size_t type_bytes(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
      return 8;
  }
  return 0;
}

// The MPI type of an NCCL type that MPI can reduce (16-bit floats have none: not emulated).
MPI_Datatype mpi_type(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
      return MPI_INT8_T;
    case ncclUint8:
      return MPI_UINT8_T;
    case ncclInt32:
      return MPI_INT32_T;
    case ncclUint32:
      return MPI_UINT32_T;
    case ncclInt64:
      return MPI_INT64_T;
    case ncclUint64:
      return MPI_UINT64_T;
    case ncclFloat32:
      return MPI_FLOAT;
    case ncclFloat64:
      return MPI_DOUBLE;
    default:
      return MPI_DATATYPE_NULL;
  }
}

MPI_Op mpi_op(ncclRedOp_t op) {
  switch (op) {
    case ncclSum:
      return MPI_SUM;
    case ncclProd:
      return MPI_PROD;
    case ncclMax:
      return MPI_MAX;
    case ncclMin:
      return MPI_MIN;
    default:
      return MPI_OP_NULL;  // ncclAvg: not emulated
  }
}

// Checks a call's communicator, type and buffers (each `count` elements of device memory).
ncclResult_t check(const char* call, ncclComm_t comm, ncclDataType_t type,
                   std::initializer_list<std::pair<const void*, std::size_t>> buffers) {
  if (comm == nullptr || comm->mpi == MPI_COMM_NULL)
    return fail(ncclInvalidArgument, std::string(call) + ": no communicator");
  if (mpi_type(type) == MPI_DATATYPE_NULL)
    return fail(ncclInvalidArgument,
                std::string(call) + ": data type " + std::to_string(type) + " is not emulated");
  for (const auto& [p, count] : buffers) {
    const std::size_t bytes = count * type_bytes(type);
    if (bytes == 0) continue;
    if (p == nullptr || !cuda_emulator::detail::device_range(p, bytes)) {
      char buf[160];
      std::snprintf(buf, sizeof buf,
                    "%s: the buffer [%p, +%zu bytes) is not inside one device allocation (NCCL "
                    "reads and writes GPU memory only)",
                    call, p, bytes);
      return fail(ncclInvalidArgument, buf);
    }
  }
  return ncclSuccess;
}

ncclResult_t mpi_result(const char* call, int rc) {
  if (rc == MPI_SUCCESS) return ncclSuccess;
  return fail(ncclSystemError, std::string(call) + ": MPI error " + std::to_string(rc));
}

// Queues a collective's MPI call on the stream; its failure becomes the communicator's
// asynchronous error (ncclCommGetAsyncError), as a GPU kernel's does.
ncclResult_t queue(const char* call, ncclComm_t comm, cudaStream_t stream,
                   std::function<int()> collective) {
  const cudaError_t rc =
      cuda_emulator::detail::enqueue(stream, [call, comm, collective = std::move(collective)] {
        if (mpi_result(call, collective()) != ncclSuccess) comm->async_error = ncclSystemError;
      });
  if (rc != cudaSuccess)
    return fail(ncclUnhandledCudaError, std::string(call) + ": the stream does not exist");
  return ncclSuccess;
}

}  // namespace

ncclResult_t ncclGetVersion(int* version) {
  *version = NCCL_MAJOR * 10000 + NCCL_MINOR * 100 + NCCL_PATCH;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  std::memset(id->internal, 0, sizeof id->internal);
  std::snprintf(id->internal, sizeof id->internal, "cuda-emulator-nccl");
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (!initialised)
    return fail(ncclInvalidUsage,
                "ncclCommInitRank: MPI is not initialised (the emulator's NCCL "
                "runs over MPI)");
  if (std::strncmp(id.internal, "cuda-emulator-nccl", sizeof id.internal) != 0)
    return fail(ncclInvalidArgument,
                "ncclCommInitRank: the unique id is not one "
                "ncclGetUniqueId made (was it broadcast from rank 0?)");
  int world_rank = 0, world_size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  if (nranks != world_size || rank != world_rank)
    return fail(ncclInvalidUsage,
                "ncclCommInitRank: the emulator's communicators span "
                "MPI_COMM_WORLD in its rank order only");
  // As NCCL does: two ranks of one node on one GPU are refused (every emulated rank shares this
  // machine, so each must have set a device of its own). Collective, so every rank decides alike.
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess)
    return fail(ncclUnhandledCudaError, "ncclCommInitRank: no current CUDA device");
  std::vector<int> devices(static_cast<std::size_t>(world_size));
  MPI_Allgather(&device, 1, MPI_INT, devices.data(), 1, MPI_INT, MPI_COMM_WORLD);
  for (int r = 0; r < world_size; ++r)
    if (r != rank && devices[static_cast<std::size_t>(r)] == device)
      return fail(ncclInvalidUsage, "ncclCommInitRank: Duplicate GPU detected: rank " +
                                        std::to_string(rank) + " and rank " + std::to_string(r) +
                                        " both on CUDA device " + std::to_string(device));
  auto* c = new ncclComm;
  if (MPI_Comm_dup(MPI_COMM_WORLD, &c->mpi) != MPI_SUCCESS) {
    delete c;
    return fail(ncclSystemError, "ncclCommInitRank: MPI_Comm_dup failed");
  }
  c->rank = rank;
  c->size = nranks;
  *comm = c;
  return ncclSuccess;
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                           ncclConfig_t* config) {
  if (comm == nullptr) return fail(ncclInvalidArgument, "ncclCommSplit: no communicator");
  if (config != nullptr)
    return fail(ncclInvalidArgument, "ncclCommSplit: a configuration is not emulated");
  // Collective over the parent, in its call order on every rank, as MPI_Comm_split is; NCCL
  // completes the work queued on the parent first.
  cuda_emulator::detail::run_all_work();
  MPI_Comm split = MPI_COMM_NULL;
  const int rc =
      MPI_Comm_split(comm->mpi, color == NCCL_SPLIT_NOCOLOR ? MPI_UNDEFINED : color, key, &split);
  if (rc != MPI_SUCCESS) return mpi_result("ncclCommSplit", rc);
  *newcomm = nullptr;
  if (split == MPI_COMM_NULL) return ncclSuccess;
  auto* c = new ncclComm;
  c->mpi = split;
  MPI_Comm_rank(split, &c->rank);
  MPI_Comm_size(split, &c->size);
  *newcomm = c;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (comm == nullptr) return fail(ncclInvalidArgument, "ncclCommUserRank: no communicator");
  *rank = comm->rank;
  return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (comm == nullptr) return fail(ncclInvalidArgument, "ncclCommFinalize: no communicator");
  cuda_emulator::detail::run_all_work();  // NCCL completes the operations queued on it first
  return mpi_result("ncclCommFinalize", MPI_Barrier(comm->mpi));
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return fail(ncclInvalidArgument, "ncclCommDestroy: no communicator");
  cuda_emulator::detail::run_all_work();
  MPI_Comm_free(&comm->mpi);
  delete comm;
  return ncclSuccess;
}

// The job is ending: nothing is released (another thread may still be inside an MPI call).
ncclResult_t ncclCommAbort(ncclComm_t) { return ncclSuccess; }

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error) {
  if (comm == nullptr) return fail(ncclInvalidArgument, "ncclCommGetAsyncError: no communicator");
  *async_error = static_cast<ncclResult_t>(comm->async_error.load());
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error";
    case ncclSystemError:
      return "unhandled system error";
    case ncclInternalError:
      return "internal error";
    case ncclInvalidArgument:
      return "invalid argument";
    case ncclInvalidUsage:
      return "invalid usage";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
  }
  return "unknown result code";
}

const char* ncclGetLastError(ncclComm_t) { return t_last_error.c_str(); }

// Each collective of a group is queued when it is called, in call order, which every rank shares.
ncclResult_t ncclGroupStart() { return ncclSuccess; }
ncclResult_t ncclGroupEnd() { return ncclSuccess; }

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, std::size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream) {
  if (ncclResult_t rc =
          check("ncclAllReduce", comm, datatype, {{sendbuff, count}, {recvbuff, count}}))
    return rc;
  if (mpi_op(op) == MPI_OP_NULL) return fail(ncclInvalidArgument, "ncclAllReduce: op not emulated");
  if (count == 0) return ncclSuccess;
  return queue("ncclAllReduce", comm, stream, [=] {
    return MPI_Allreduce(sendbuff == recvbuff ? MPI_IN_PLACE : sendbuff, recvbuff,
                         static_cast<int>(count), mpi_type(datatype), mpi_op(op), comm->mpi);
  });
}

ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, std::size_t count,
                        ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                        cudaStream_t stream) {
  const bool is_root = comm != nullptr && comm->rank == root;
  if (ncclResult_t rc =
          check("ncclReduce", comm, datatype,
                {{sendbuff, count}, {is_root ? recvbuff : nullptr, is_root ? count : 0}}))
    return rc;
  if (root < 0 || root >= comm->size) return fail(ncclInvalidArgument, "ncclReduce: bad root");
  if (mpi_op(op) == MPI_OP_NULL) return fail(ncclInvalidArgument, "ncclReduce: op not emulated");
  if (count == 0) return ncclSuccess;
  const void* send = is_root && sendbuff == recvbuff ? MPI_IN_PLACE : sendbuff;
  return queue("ncclReduce", comm, stream, [=] {
    return MPI_Reduce(send, recvbuff, static_cast<int>(count), mpi_type(datatype), mpi_op(op), root,
                      comm->mpi);
  });
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, std::size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream) {
  const std::size_t total = comm != nullptr ? recvcount * static_cast<std::size_t>(comm->size) : 0;
  if (ncclResult_t rc =
          check("ncclReduceScatter", comm, datatype, {{sendbuff, total}, {recvbuff, recvcount}}))
    return rc;
  if (mpi_op(op) == MPI_OP_NULL)
    return fail(ncclInvalidArgument, "ncclReduceScatter: op not emulated");
  if (recvcount == 0) return ncclSuccess;
  return queue("ncclReduceScatter", comm, stream, [=] {
    // Through a host copy: in place, NCCL's output block lies inside the input.
    std::vector<char> out(recvcount * type_bytes(datatype));
    const int rc = MPI_Reduce_scatter_block(sendbuff, out.data(), static_cast<int>(recvcount),
                                            mpi_type(datatype), mpi_op(op), comm->mpi);
    if (rc == MPI_SUCCESS) std::memcpy(recvbuff, out.data(), out.size());
    return rc;
  });
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, std::size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  const std::size_t total = comm != nullptr ? sendcount * static_cast<std::size_t>(comm->size) : 0;
  if (ncclResult_t rc =
          check("ncclAllGather", comm, datatype, {{sendbuff, sendcount}, {recvbuff, total}}))
    return rc;
  if (sendcount == 0) return ncclSuccess;
  const std::size_t block = sendcount * type_bytes(datatype);
  const bool in_place =
      sendbuff == static_cast<const char*>(recvbuff) + block * static_cast<std::size_t>(comm->rank);
  return queue("ncclAllGather", comm, stream, [=] {
    return MPI_Allgather(in_place ? MPI_IN_PLACE : sendbuff, static_cast<int>(sendcount),
                         mpi_type(datatype), recvbuff, static_cast<int>(sendcount),
                         mpi_type(datatype), comm->mpi);
  });
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, std::size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream) {
  const bool is_root = comm != nullptr && comm->rank == root;
  if (ncclResult_t rc =
          check("ncclBroadcast", comm, datatype,
                {{is_root ? sendbuff : nullptr, is_root ? count : 0}, {recvbuff, count}}))
    return rc;
  if (root < 0 || root >= comm->size) return fail(ncclInvalidArgument, "ncclBroadcast: bad root");
  if (count == 0) return ncclSuccess;
  return queue("ncclBroadcast", comm, stream, [=] {
    if (is_root && sendbuff != recvbuff)
      std::memcpy(recvbuff, sendbuff, count * type_bytes(datatype));
    return MPI_Bcast(recvbuff, static_cast<int>(count), mpi_type(datatype), root, comm->mpi);
  });
}
