// The CUDA emulator's nccl.h: the part of NCCL's API that dist/nccl_communicator.cc calls,
// implemented over MPI between the processes mpirun started (tests/cuda_emulator/nccl.cc), one
// emulated GPU per process. Each collective is queued on its stream and runs when that stream
// runs, like the emulator's kernels and copies. It checks what NCCL requires of its callers and a
// CPU run would not notice: buffers in device memory, the same collective in the same order on
// every rank (MPI's matching), and the in-place layouts NCCL defines. Its sums are MPI's, not
// NCCL's ring or tree order.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#define NCCL_MAJOR 2
#define NCCL_MINOR 0
#define NCCL_PATCH 0
#define NCCL_UNIQUE_ID_BYTES 128

struct ncclComm;
using ncclComm_t = ncclComm*;

struct ncclUniqueId {
  char internal[NCCL_UNIQUE_ID_BYTES];
};

enum ncclResult_t : int {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
};

enum ncclDataType_t : int {
  ncclInt8 = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclFloat32 = 7,
  ncclFloat64 = 8,
  ncclBfloat16 = 9,
};

enum ncclRedOp_t : int { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 };

ncclResult_t ncclGetVersion(int* version);
ncclResult_t ncclGetUniqueId(ncclUniqueId* id);
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank);
// ncclCommSplit (NCCL >= 2.18): a configuration is not emulated (pass null: the parent's).
#define NCCL_SPLIT_NOCOLOR -1
struct ncclConfig_t;
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                           ncclConfig_t* config);
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank);
ncclResult_t ncclCommFinalize(ncclComm_t comm);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error);
const char* ncclGetErrorString(ncclResult_t result);
const char* ncclGetLastError(ncclComm_t comm);

ncclResult_t ncclGroupStart();
ncclResult_t ncclGroupEnd();

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, std::size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, std::size_t count,
                        ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                        cudaStream_t stream);
ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, std::size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream);
ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, std::size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, std::size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
