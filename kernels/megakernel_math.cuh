// decode=megakernel's arithmetic: loads in the weights' dtype, reductions over the consumer warps,
// and the two block products every phase is made of.
#pragma once
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "megakernel_sync.cuh"

namespace mk {

// ---- loads and stores in the weights' dtype ---------------------------------------------------

__device__ __forceinline__ void unpack8(uint4 v, float (&w)[8]) {  // 8 bf16, element 0 in the low half
  w[0] = __uint_as_float(v.x << 16), w[1] = __uint_as_float(v.x & 0xffff0000u);
  w[2] = __uint_as_float(v.y << 16), w[3] = __uint_as_float(v.y & 0xffff0000u);
  w[4] = __uint_as_float(v.z << 16), w[5] = __uint_as_float(v.z & 0xffff0000u);
  w[6] = __uint_as_float(v.w << 16), w[7] = __uint_as_float(v.w & 0xffff0000u);
}
__device__ __forceinline__ void load8(const __nv_bfloat16* p, float (&w)[8]) {
  unpack8(*reinterpret_cast<const uint4*>(p), w);
}
__device__ __forceinline__ void load8(const float* p, float (&w)[8]) {
  const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
  w[0] = a.x, w[1] = a.y, w[2] = a.z, w[3] = a.w, w[4] = b.x, w[5] = b.y, w[6] = b.z, w[7] = b.w;
}
// 8 elements of a cache row, loaded through L2 now and unpacked later (loads in flight together)
template <typename T> struct Chunk;
template <> struct Chunk<__nv_bfloat16> {
  uint4 a;
  __device__ __forceinline__ void load_cg(const __nv_bfloat16* p) { a = __ldcg(reinterpret_cast<const uint4*>(p)); }
  __device__ __forceinline__ void unpack(float (&w)[8]) const { unpack8(a, w); }
};
template <> struct Chunk<float> {
  float4 a, b;
  __device__ __forceinline__ void load_cg(const float* p) {
    a = __ldcg(reinterpret_cast<const float4*>(p)), b = __ldcg(reinterpret_cast<const float4*>(p) + 1);
  }
  __device__ __forceinline__ void unpack(float (&w)[8]) const {
    w[0] = a.x, w[1] = a.y, w[2] = a.z, w[3] = a.w, w[4] = b.x, w[5] = b.y, w[6] = b.z, w[7] = b.w;
  }
};
__device__ __forceinline__ float f32(float x) { return x; }
__device__ __forceinline__ float f32(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ void store(float* p, float v) { *p = v; }
__device__ __forceinline__ void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }
// A parameter vector the model may not have (bias=false): zero then.
template <typename T> __device__ __forceinline__ float param(const T* p, int i) {
  return p == nullptr ? 0.f : f32(p[i]);
}

// ---- reductions over the consumer warps -------------------------------------------------------

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFull, v, o));
  return v;
}
// The sum (or max) of v over every consumer thread; buf holds kConsumerWarps + 1 floats.
__device__ float block_reduce(float v, float* buf, bool is_max) {
  v = is_max ? warp_max(v) : warp_sum(v);
  if ((threadIdx.x & 31) == 0) buf[threadIdx.x >> 5] = v;
  consumer_sync();
  if (threadIdx.x < 32) {
    float w = threadIdx.x < kConsumerWarps ? buf[threadIdx.x] : (is_max ? -INFINITY : 0.f);
    w = is_max ? warp_max(w) : warp_sum(w);
    if (threadIdx.x == 0) buf[kConsumerWarps] = w;
  }
  consumer_sync();
  const float r = buf[kConsumerWarps];
  consumer_sync();
  return r;
}

// ---- the block products -----------------------------------------------------------------------

// out[r][b] = W[r, :] . x[b, :] for a block of nr <= 256 rows of K columns, stored chunk-major (the
// 8 elements k = 8i..8i+7 of row r at W + (i * nr + r) * 8), and NB input rows x (row stride ldx).
// Thread (r, s) takes chunks s, s + S, ... of row r: the lanes of a warp read neighbouring rows'
// chunks (one contiguous 16-byte load each) and mostly the same x chunk (a broadcast). The sum over
// s: shuffles within a warp, then `red` (kConsumers * NB floats) across warps. epi(r, b, value)
// is called once per (r, b) by one thread; shared memory it writes is visible after the return.
template <typename T, int NB, class Epi>
__device__ void block_matvec(const T* W, int nr, int K, const float* x, int ldx, float* red, Epi epi) {
  const int tid = threadIdx.x;
  int nr_pad = 1;
  while (nr_pad < nr) nr_pad <<= 1;
  const int S = kConsumers / nr_pad;
  const int r = tid & (nr_pad - 1), s = tid / nr_pad;
  float acc[NB];
#pragma unroll
  for (int b = 0; b < NB; ++b) acc[b] = 0.f;
  if (r < nr) {
    for (int i = s; i < (K >> 3); i += S) {
      float w[8];
      load8(W + (static_cast<size_t>(i) * nr + r) * 8, w);
#pragma unroll
      for (int b = 0; b < NB; ++b) {
        const float4 a = *reinterpret_cast<const float4*>(x + b * ldx + i * 8);
        const float4 c = *reinterpret_cast<const float4*>(x + b * ldx + i * 8 + 4);
        acc[b] += w[0] * a.x + w[1] * a.y + w[2] * a.z + w[3] * a.w + w[4] * c.x + w[5] * c.y + w[6] * c.z +
                  w[7] * c.w;
      }
    }
  }
  for (int o = nr_pad; o < 32; o <<= 1) {
#pragma unroll
    for (int b = 0; b < NB; ++b) acc[b] += __shfl_xor_sync(kFull, acc[b], o);
  }
  const int group = nr_pad < 32 ? 32 : nr_pad;  // threads of one s_hi
  const int n_hi = kConsumers / group;
  if (n_hi == 1) {
    if (r < nr) {
#pragma unroll
      for (int b = 0; b < NB; ++b) epi(r, b, acc[b]);
    }
  } else {
    if (r < nr && (tid % group) < nr_pad) {
#pragma unroll
      for (int b = 0; b < NB; ++b) red[((tid / group) * nr_pad + r) * NB + b] = acc[b];
    }
    consumer_sync();
    for (int idx = tid; idx < nr * NB; idx += kConsumers) {
      const int rr = idx / NB, b = idx % NB;
      float v = 0.f;
      for (int h = 0; h < n_hi; ++h) v += red[(h * nr_pad + rr) * NB + b];
      epi(rr, b, v);
    }
  }
  consumer_sync();
}

// acc[b][e] += sum over the block's rows r of u[b][row0 + r] * W[r][8i + e], thread i's 8 columns,
// for a row-major block of nr rows of C columns (W_proj2's transpose: a hidden unit a row).
template <typename T, int NB>
__device__ void block_axpy(const T* W, int nr, int C, const float* u, int ldu, int row0, float (&acc)[NB][8]) {
  const int i = threadIdx.x;
  if (i >= (C >> 3)) return;
  for (int r = 0; r < nr; ++r) {
    float w[8];
    load8(W + static_cast<size_t>(r) * C + i * 8, w);
#pragma unroll
    for (int b = 0; b < NB; ++b) {
      const float ub = u[b * ldu + row0 + r];
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[b][e] += ub * w[e];
    }
  }
}

}  // namespace mk
