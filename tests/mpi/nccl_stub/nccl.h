// A stub of the few NCCL declarations docs/multi-rank.md's NCCL example uses, so that the example is compiled where
// NCCL is not installed (tests/mpi/CMakeLists.txt prefers the real nccl.h). Declarations only: never linked.
#ifndef NANSCOPE_TEST_NCCL_STUB_H
#define NANSCOPE_TEST_NCCL_STUB_H
#include <cstddef>
#include "cuda_runtime.h"
typedef struct ncclComm* ncclComm_t;
typedef enum { ncclSuccess = 0 } ncclResult_t;
typedef enum { ncclFloat = 7 } ncclDataType_t;
typedef enum { ncclSum = 0 } ncclRedOp_t;
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank);
ncclResult_t ncclCommCount(const ncclComm_t comm, int* count);
ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream);
#endif
