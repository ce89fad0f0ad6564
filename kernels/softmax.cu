// Row softmax, the seed's two kernels (the adaptive choice between them is made in Python):
//   block  one block per row, 256 threads stride the row, shared-memory tree reductions
//   warp   one warp per row, 8 rows per block, shuffle reductions (no shared memory, no syncs)
// Rows may hold -inf (causal mask); they come out as 0. Accumulation is fp32 for bf16 too.
#include "cuda_common.cuh"
#include "launchers.h"

namespace tfo {
namespace softmax {

constexpr int kBlockThreads = 256;  // power of two, as the tree reduction needs
constexpr int kWarpRows = 8;

struct WarpReduce {
  template <class Op> __device__ float operator()(float x, Op op) const { return warp_allreduce(x, op); }
};
struct BlockReduce {
  float* buf;
  template <class Op> __device__ float operator()(float x, Op op) const { return block_allreduce(x, buf, op); }
};

// One row, traversed by `stride` threads starting at `first`; the kernels differ only in who
// traverses and how partial results meet. Three passes over x: max, sum, write.
template <typename T, class Reduce>
__device__ __forceinline__ void softmax_row(const T* x, T* y, int64_t n, int first, int stride, Reduce reduce) {
  float m = -INFINITY;
  for (int64_t j = first; j < n; j += stride) m = fmaxf(m, to_f32(x[j]));
  m = reduce(m, MaxOp());
  float s = 0.f;
  for (int64_t j = first; j < n; j += stride) s += exp2f((to_f32(x[j]) - m) * kLog2e);
  s = reduce(s, SumOp());
  const float inv = 1.f / s;
  for (int64_t j = first; j < n; j += stride) y[j] = from_f32<T>(exp2f((to_f32(x[j]) - m) * kLog2e) * inv);
}

template <typename T>
__global__ void __launch_bounds__(kBlockThreads) block_per_row(const T* x, T* y, int64_t n) {
  __shared__ float buf[kBlockThreads];
  const int64_t row = blockIdx.x;
  softmax_row(x + row * n, y + row * n, n, threadIdx.x, kBlockThreads, BlockReduce{buf});
}

template <typename T>
__global__ void __launch_bounds__(32 * kWarpRows) warp_per_row(const T* x, T* y, int64_t rows, int64_t n) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpRows + threadIdx.x / 32;
  if (row >= rows) return;  // warp-uniform, so the shuffles below see all 32 lanes
  softmax_row(x + row * n, y + row * n, n, threadIdx.x & 31, 32, WarpReduce{});
}

template <typename T>
cudaError_t launch(SoftmaxVariant variant, const void* xp, void* yp, int64_t rows, int64_t n, cudaStream_t stream) {
  const T* x = static_cast<const T*>(xp);
  T* y = static_cast<T*>(yp);
  switch (variant) {
    case kSoftmaxBlock:
      block_per_row<T><<<static_cast<unsigned>(rows), kBlockThreads, 0, stream>>>(x, y, n);
      break;
    case kSoftmaxWarp:
      warp_per_row<T><<<static_cast<unsigned>((rows + kWarpRows - 1) / kWarpRows), 32 * kWarpRows, 0, stream>>>(
          x, y, rows, n);
      break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace softmax

cudaError_t softmax_forward(SoftmaxVariant variant, DType dtype, const void* x, void* y, int64_t rows, int64_t n,
                            cudaStream_t stream) {
  if (rows < 0 || n < 0 || rows > 0x7fffffffLL) return cudaErrorInvalidValue;  // rows ride on grid.x
  if (rows == 0 || n == 0) return cudaSuccess;
  switch (dtype) {
    case kFloat32: return softmax::launch<float>(variant, x, y, rows, n, stream);
    case kBFloat16: return softmax::launch<__nv_bfloat16>(variant, x, y, rows, n, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace tfo
