// Every kernel instantiation of the CUDA backend in one translation unit, for tests/cuda/resource_usage.py:
// nvcc compiles it to a cubin for one architecture with -Xptxas -v, and the script reads each kernel's
// registers, spills and shared memory and checks them against the budgets of docs/cuda.md. Never linked or run.
//
// The kernels are instantiated through detail::launch, which names health_kernel<L, Params> for every check
// level L (1 non-finite only, 2 counts and extrema, 3 stats) of the Params it is instantiated with; the two
// launch shapes are the single-tensor and the batch parameters. seg_launch names the segment kernel's two levels,
// bsc_launch the block-scaled statistics' kernels (bsc_kernel<bsc_params> and bsc_quad_kernel<bsc_params, 1>). A new kernel or launch shape belongs
// here (the script fails on a kernel it has no budget for, and on a budgeted kernel it does not find).
#include <nanscope/cuda.cuh>

template void nanscope::cuda::detail::launch<nanscope::cuda::detail::single_params>(
    int, const nanscope::cuda::detail::single_params&, cudaStream_t);
template void nanscope::cuda::detail::launch<nanscope::cuda::detail::batch_params>(
    int, const nanscope::cuda::detail::batch_params&, cudaStream_t);
template void nanscope::cuda::detail::seg_launch<nanscope::cuda::detail::seg_params>(
    int, const nanscope::cuda::detail::seg_params&, unsigned, cudaStream_t);
template void nanscope::cuda::detail::bsc_launch<nanscope::cuda::detail::bsc_params>(
    const nanscope::cuda::detail::bsc_params&, cudaStream_t, const char*);
