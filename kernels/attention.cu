// Fused causal attention forward, the seed's ladder (each rung fixes what the previous one wasted):
//   v1  one thread per query row, the whole head dim in registers
//   v2  a warp per query row, head dims split across lanes (a warp reduction per key)
//   v3  a warp per query row, lane = key: 32 scores at once, one warp per block
//   v4  v3 with 8 query rows per block sharing a K/V tile in shared memory
//   v5  v4 with the K tile stored transposed, removing v4's 32-way bank conflict
// All use online softmax (running max and sum, rescaled accumulator) and never hold T x T.
// Queries are the last Tq of Tk positions: query i sees keys 0 .. i + Tk - Tq (bottom-right).
#include "cuda_common.cuh"
#include "launchers.h"

namespace tfo {
namespace attn {

constexpr int kTile = 32;  // keys per step in the lane = key kernels: one per lane

struct Params {
  Bhtd q, k, v, o;
  int H, Tq, Tk;
  float scale_log2;  // softmax scale * log2(e): scores come out ready for exp2
};

// Head dims owned by one lane when dims are split across a warp: lane, lane + 32, ...
// (D = 16: lanes 16..31 own nothing).
template <int D> struct Split {
  static constexpr int kPerLane = (D + 31) / 32;
  static __device__ __forceinline__ bool owns(int lane, int r) { return lane + 32 * r < D; }
};

// The (batch, head) slice this block works on (blockIdx.y = b * H + h).
template <typename T> struct HeadPtrs {
  const T *q, *k, *v;
  T* o;
  int64_t qst, kst, vst, ost;
  __device__ explicit HeadPtrs(const Params& p) {
    const int b = blockIdx.y / p.H, h = blockIdx.y % p.H;
    q = static_cast<const T*>(p.q.ptr) + b * p.q.sb + h * p.q.sh;
    k = static_cast<const T*>(p.k.ptr) + b * p.k.sb + h * p.k.sh;
    v = static_cast<const T*>(p.v.ptr) + b * p.v.sb + h * p.v.sh;
    o = static_cast<T*>(p.o.ptr) + b * p.o.sb + h * p.o.sh;
    qst = p.q.st; kst = p.k.st; vst = p.v.st; ost = p.o.st;
  }
};

__device__ __forceinline__ int last_key(const Params& p, int i) { return i + p.Tk - p.Tq; }

// ---- v1: one thread per query row --------------------------------------------------------
template <typename T, int D>
__global__ void v1_thread_per_row(Params p) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= p.Tq) return;
  const HeadPtrs<T> hp(p);
  float q[D], acc[D];
#pragma unroll
  for (int d = 0; d < D; ++d) {
    q[d] = to_f32(hp.q[i * hp.qst + d]) * p.scale_log2;
    acc[d] = 0.f;
  }
  OnlineSoftmax st;
  const int last = last_key(p, i);
  for (int j = 0; j <= last; ++j) {
    const T* kj = hp.k + j * hp.kst;
    const T* vj = hp.v + j * hp.vst;
    float s = 0.f;
#pragma unroll
    for (int d = 0; d < D; ++d) s += q[d] * to_f32(kj[d]);
    const float c = st.rescale_to(s);
    const float pj = exp2f(s - st.m);
    st.l += pj;
#pragma unroll
    for (int d = 0; d < D; ++d) acc[d] = acc[d] * c + pj * to_f32(vj[d]);
  }
  const float inv = 1.f / st.l;
#pragma unroll
  for (int d = 0; d < D; ++d) hp.o[i * hp.ost + d] = from_f32<T>(acc[d] * inv);
}

// ---- v2: a warp per query row, head dims split across lanes -------------------------------
template <typename T, int D, int kWarps>
__global__ void v2_warp_split_dims(Params p) {
  using S = Split<D>;
  const int lane = threadIdx.x & 31;
  const int i = static_cast<int>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (i >= p.Tq) return;  // warp-uniform: no lane is left behind in a shuffle
  const HeadPtrs<T> hp(p);
  float q[S::kPerLane], acc[S::kPerLane];
#pragma unroll
  for (int r = 0; r < S::kPerLane; ++r) {
    q[r] = S::owns(lane, r) ? to_f32(hp.q[i * hp.qst + lane + 32 * r]) * p.scale_log2 : 0.f;
    acc[r] = 0.f;
  }
  OnlineSoftmax st;
  const int last = last_key(p, i);
  for (int j = 0; j <= last; ++j) {
    float part = 0.f;
#pragma unroll
    for (int r = 0; r < S::kPerLane; ++r)
      if (S::owns(lane, r)) part += q[r] * to_f32(hp.k[j * hp.kst + lane + 32 * r]);
    const float s = warp_allreduce(part, SumOp());  // 5 shuffles per key: v2's cost
    const float c = st.rescale_to(s);
    const float pj = exp2f(s - st.m);
    st.l += pj;
#pragma unroll
    for (int r = 0; r < S::kPerLane; ++r)
      if (S::owns(lane, r)) acc[r] = acc[r] * c + pj * to_f32(hp.v[j * hp.vst + lane + 32 * r]);
  }
  const float inv = 1.f / st.l;
#pragma unroll
  for (int r = 0; r < S::kPerLane; ++r)
    if (S::owns(lane, r)) hp.o[i * hp.ost + lane + 32 * r] = from_f32<T>(acc[r] * inv);
}

// ---- v3..v5: lane = key; the tile policy says where a step's 32 keys are read from ---------

// v3: straight from global memory, no sharing (one warp per block).
template <typename T, int D> struct GlobalTile {
  static constexpr int kSmemFloats = 1;  // unused; a zero-size array is not allowed
  const T *k, *v;
  int64_t kst, vst;
  int j0 = 0;
  __device__ GlobalTile(const HeadPtrs<T>& hp, float*) : k(hp.k), v(hp.v), kst(hp.kst), vst(hp.vst) {}
  __device__ __forceinline__ void load(int first_key, int, int) { j0 = first_key; }
  __device__ __forceinline__ void release() {}
  __device__ __forceinline__ float key(int kk, int d) const { return to_f32(k[(j0 + kk) * kst + d]); }
  __device__ __forceinline__ float val(int kk, int d) const { return to_f32(v[(j0 + kk) * vst + d]); }
};

// v4 (kTransposed = false): K as ks[key][d]; lanes reading ks[lane][d] for one d all hit the
// same bank when D is a multiple of 32. v5 (true): K as kt[d][key], lanes read consecutive
// words; the row is padded to 33 so the cooperative store (consecutive d) is conflict-free too.
template <typename T, int D, bool kTransposed> struct SharedTile {
  static constexpr int kKStride = kTransposed ? kTile + 1 : D;
  static constexpr int kKFloats = kTransposed ? D * (kTile + 1) : kTile * D;
  static constexpr int kSmemFloats = kKFloats + kTile * D;
  const T *k, *v;
  int64_t kst, vst;
  float *ks, *vs;
  __device__ SharedTile(const HeadPtrs<T>& hp, float* smem)
      : k(hp.k), v(hp.v), kst(hp.kst), vst(hp.vst), ks(smem), vs(smem + kKFloats) {}
  // Whole block: consecutive threads take consecutive d, so global reads are coalesced.
  __device__ __forceinline__ void load(int j0, int tk, int nthreads) {
    for (int idx = threadIdx.x; idx < kTile * D; idx += nthreads) {
      const int kk = idx / D, d = idx % D, j = j0 + kk;
      const bool in = j < tk;  // zero-fill past the end: masked keys must not carry NaN/garbage
      const float kv = in ? to_f32(k[j * kst + d]) : 0.f;
      const float vv = in ? to_f32(v[j * vst + d]) : 0.f;
      if (kTransposed) ks[d * kKStride + kk] = kv;
      else ks[kk * kKStride + d] = kv;
      vs[kk * D + d] = vv;
    }
    __syncthreads();
  }
  __device__ __forceinline__ void release() { __syncthreads(); }  // before the next load overwrites
  __device__ __forceinline__ float key(int kk, int d) const {
    return kTransposed ? ks[d * kKStride + kk] : ks[kk * kKStride + d];
  }
  __device__ __forceinline__ float val(int kk, int d) const { return vs[kk * D + d]; }
};

// kRows warps per block, warp w owns query row blockIdx.x * kRows + w. Per 32-key step, lane l
// scores key j0 + l against the full query, then the warp folds the step into the online
// softmax and lanes switch roles to own head dims for the P V accumulation.
template <typename T, int D, int kRows, class Tile>
__global__ void __launch_bounds__(32 * kRows) lane_key(Params p) {
  using S = Split<D>;
  __shared__ float smem[Tile::kSmemFloats];
  const int lane = threadIdx.x & 31;
  const int i = static_cast<int>(blockIdx.x) * kRows + threadIdx.x / 32;
  const bool active = i < p.Tq;  // inactive warps still help load tiles and reach the syncs
  const int last = active ? last_key(p, i) : -1;
  const int block_last = last_key(p, min(static_cast<int>(blockIdx.x) * kRows + kRows - 1, p.Tq - 1));
  const HeadPtrs<T> hp(p);
  Tile tile(hp, smem);

  float q[D], acc[S::kPerLane];
#pragma unroll
  for (int d = 0; d < D; ++d) q[d] = active ? to_f32(hp.q[i * hp.qst + d]) * p.scale_log2 : 0.f;
#pragma unroll
  for (int r = 0; r < S::kPerLane; ++r) acc[r] = 0.f;
  OnlineSoftmax st;

  for (int j0 = 0; j0 <= block_last; j0 += kTile) {
    tile.load(j0, p.Tk, 32 * kRows);
    if (j0 <= last) {  // warp-uniform; the step holds at least one visible key
      float s = -INFINITY;
      if (j0 + lane <= last) {
        s = 0.f;
#pragma unroll
        for (int d = 0; d < D; ++d) s += q[d] * tile.key(lane, d);
      }
      const float c = st.rescale_to(warp_allreduce(s, MaxOp()));
      const float pj = exp2f(s - st.m);  // masked lanes: exp2(-inf) = 0
      st.l += warp_allreduce(pj, SumOp());
#pragma unroll
      for (int r = 0; r < S::kPerLane; ++r) acc[r] *= c;
      const int n = min(kTile, last - j0 + 1);
      for (int kk = 0; kk < n; ++kk) {
        const float pk = __shfl_sync(kFullMask, pj, kk);
#pragma unroll
        for (int r = 0; r < S::kPerLane; ++r)
          if (S::owns(lane, r)) acc[r] += pk * tile.val(kk, lane + 32 * r);
      }
    }
    tile.release();
  }
  if (!active) return;
  const float inv = 1.f / st.l;
#pragma unroll
  for (int r = 0; r < S::kPerLane; ++r)
    if (S::owns(lane, r)) hp.o[i * hp.ost + lane + 32 * r] = from_f32<T>(acc[r] * inv);
}

// ---- dispatch ------------------------------------------------------------------------------
inline unsigned blocks_for(int n, int per_block) { return static_cast<unsigned>((n + per_block - 1) / per_block); }

template <typename T, int D>
cudaError_t launch(int version, const Params& p, unsigned bh, cudaStream_t stream) {
  constexpr int kV2Warps = 4, kSharedRows = 8;
  switch (version) {
    case 1: v1_thread_per_row<T, D><<<dim3(blocks_for(p.Tq, 128), bh), 128, 0, stream>>>(p); break;
    case 2:
      v2_warp_split_dims<T, D, kV2Warps><<<dim3(blocks_for(p.Tq, kV2Warps), bh), 32 * kV2Warps, 0, stream>>>(p);
      break;
    case 3: lane_key<T, D, 1, GlobalTile<T, D>><<<dim3(p.Tq, bh), 32, 0, stream>>>(p); break;
    case 4:
      lane_key<T, D, kSharedRows, SharedTile<T, D, false>>
          <<<dim3(blocks_for(p.Tq, kSharedRows), bh), 32 * kSharedRows, 0, stream>>>(p);
      break;
    case 5:
      lane_key<T, D, kSharedRows, SharedTile<T, D, true>>
          <<<dim3(blocks_for(p.Tq, kSharedRows), bh), 32 * kSharedRows, 0, stream>>>(p);
      break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_dim(int version, int D, const Params& p, unsigned bh, cudaStream_t stream) {
  switch (D) {
    case 16: return launch<T, 16>(version, p, bh, stream);
    case 32: return launch<T, 32>(version, p, bh, stream);
    case 64: return launch<T, 64>(version, p, bh, stream);
    case 128: return launch<T, 128>(version, p, bh, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace attn

bool attention_head_dim_supported(int head_dim) {
  return head_dim == 16 || head_dim == 32 || head_dim == 64 || head_dim == 128;
}

cudaError_t attention_forward(int version, DType dtype, Bhtd q, Bhtd k, Bhtd v, Bhtd o,
                              AttnShape s, float scale, cudaStream_t stream) {
  if (s.Tq < 0 || s.Tq > s.Tk || !attention_head_dim_supported(s.D)) return cudaErrorInvalidValue;
  const int64_t bh = static_cast<int64_t>(s.B) * s.H;
  if (bh > 65535) return cudaErrorInvalidValue;  // (b, h) rides on grid.y
  if (bh == 0 || s.Tq == 0) return cudaSuccess;
  const attn::Params p{q, k, v, o, s.H, s.Tq, s.Tk, scale * kLog2e};
  switch (dtype) {
    case kFloat32: return attn::launch_dim<float>(version, s.D, p, static_cast<unsigned>(bh), stream);
    case kBFloat16: return attn::launch_dim<__nv_bfloat16>(version, s.D, p, static_cast<unsigned>(bh), stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace tfo
