// Device helpers shared by the attention and softmax kernels: fp32 accumulation whatever the
// storage dtype, warp/block reductions, and the online-softmax running state.
#pragma once
#include <cmath>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace tfo {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr float kLog2e = 1.4426950408889634f;  // exp(x) = exp2(x * log2 e): one ex2 instruction

// Explicit conversions: torch builds with __CUDA_NO_BFLOAT16_CONVERSIONS__, so no implicit ones.
__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> __device__ __forceinline__ T from_f32(float x);
template <> __device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) {
  return __float2bfloat16(x);
}

struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct SumOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};

// Butterfly shuffle: every lane ends with the reduction of all 32 lanes.
template <class Op>
__device__ __forceinline__ float warp_allreduce(float x, Op op) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) x = op(x, __shfl_xor_sync(kFullMask, x, offset));
  return x;
}

// Shared-memory tree reduction (blockDim.x a power of two, buf holds blockDim.x floats); every
// thread gets the result. The trailing sync lets the caller reuse buf straight away.
template <class Op>
__device__ float block_allreduce(float x, float* buf, Op op) {
  buf[threadIdx.x] = x;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) buf[threadIdx.x] = op(buf[threadIdx.x], buf[threadIdx.x + s]);
    __syncthreads();
  }
  float r = buf[0];
  __syncthreads();
  return r;
}

// Running max m and sum l of exp2(s - m) over the scores seen so far (scores in log2 units).
struct OnlineSoftmax {
  float m = -INFINITY, l = 0.f;
  // Move the reference max to cover `new_max`; returns the factor that rescales what was
  // accumulated against the old max (0 on the first call, since exp2(-inf) = 0).
  __device__ __forceinline__ float rescale_to(float new_max) {
    float m_new = fmaxf(m, new_max);
    float c = exp2f(m - m_new);
    l *= c;
    m = m_new;
    return c;
  }
};

}  // namespace tfo
