// A stub of the one CUDA runtime type docs/multi-rank.md's NCCL example uses (see nccl.h here).
#ifndef NANSCOPE_TEST_CUDA_RUNTIME_STUB_H
#define NANSCOPE_TEST_CUDA_RUNTIME_STUB_H
typedef struct CUstream_st* cudaStream_t;
#endif
