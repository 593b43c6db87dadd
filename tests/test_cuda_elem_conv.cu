// tests/test_cuda_elem.c compiled by nvcc for the host, with RR__ELEM_HOST_CUDA_CONV: the
// element functions of cuda/reduce_elem.cuh then convert float16 / bfloat16 with the CUDA
// library's conversions (cuda_fp16.h, cuda_bf16.h), as the kernels do on the device, and
// the same comparisons with ring/op.c run on them: every dtype x op, the word forms of the
// vector path, the NaN selections. What it runs is the headers' host versions of the
// conversions; tests/test_cuda_conv.cu proves those equal to common/half.h input by input,
// and only a GPU (test_cuda kernel) shows the hardware instructions agree with them.
#define RR__ELEM_HOST_CUDA_CONV 1
#include "tests/test_cuda_elem.c"
