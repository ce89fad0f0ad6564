// Host entry points of the CUDA kernels: raw pointers, sizes and a stream, no torch types, so the
// .cu files compile with plain nvcc and the torch binding (kernels/cuda_build.py) only adapts tensors.
#pragma once
#include <cstdint>
#include <cuda_runtime.h>

namespace tfo {

enum DType : int { kFloat32 = 0, kBFloat16 = 1 };
enum SoftmaxVariant : int { kSoftmaxBlock = 0, kSoftmaxWarp = 1 };

// A (B, H, T, D) tensor as its base pointer and element strides of B, H and T; D is contiguous.
// Strides let q/k/v be views of the fused qkv projection or of a KV cache without a copy.
struct Bhtd {
  void* ptr;
  int64_t sb, sh, st;
};

struct AttnShape {
  int B, H, Tq, Tk, D;  // Tq <= Tk: queries are the last Tq positions (bottom-right causal)
};

// o = softmax(q k^T * scale + causal) v with the ladder kernel `version` (1..5).
// Returns cudaErrorInvalidValue for an unsupported version, head dim, dtype or shape.
cudaError_t attention_forward(int version, DType dtype, Bhtd q, Bhtd k, Bhtd v, Bhtd o,
                              AttnShape shape, float scale, cudaStream_t stream);
bool attention_head_dim_supported(int head_dim);

// y = softmax(x) over rows of length n (both contiguous, rows x n).
cudaError_t softmax_forward(SoftmaxVariant variant, DType dtype, const void* x, void* y,
                            int64_t rows, int64_t n, cudaStream_t stream);

}  // namespace tfo
