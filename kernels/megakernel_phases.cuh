// decode=megakernel's phases other than the block products: reading a stream slot with its
// LayerNorm, one attention item, the combine of the items' partial softmaxes, and the sampling.
// Each is written so that its global loads go out together and it waits for them once: on this
// path the time of a token is a chain of such waits (an L2 round trip each), not bandwidth.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "megakernel_math.cuh"

namespace mk {

constexpr int kMaxColumns = 8;  // columns of the stream a consumer thread owns: C <= 8 * kConsumers
// cache rows a thread loads at once in an attention item: 64 registers of chunks, K's and V's
template <typename T> struct BatchRows { static constexpr int value = 16 / sizeof(T); };
constexpr int kMaxBatch = 8;
constexpr int kStats = 2 * kConsumerWarps * kMaxBatch;  // floats of load_norm's row sums

// xraw = the stream slot (B rows of C, zero rows up to NB) and xn = its LayerNorm (g, beta), from
// one round of loads (thread i owns columns i, i + 256, ...); the slot is the sum of its first
// REPS copies, `rep_stride` floats apart. With fold_into, also adds the slot plus fold_bias into
// fold_into (the residual term of the phase's output, once, by one CTA).
// stats: 2 * kConsumerWarps * NB floats; stage: 3C floats.
template <typename T, int NB, int REPS>
__device__ void load_norm(const Params& p, const float* slot, size_t rep_stride, const T* g, const T* beta,
                          float* xraw, float* xn, float* stats, float* stage, float* fold_into, const T* fold_bias) {
  const int C = p.C, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float v[NB][kMaxColumns];
#pragma unroll
  for (int j = 0; j < kMaxColumns; ++j) {  // g, beta and fold_bias go to `stage` (3C floats): fewer registers
    const int c = threadIdx.x + j * kConsumers;
    const bool ok = c < C;
    const float gj = ok ? f32(g[c]) : 0.f, bj = ok ? param(beta, c) : 0.f;
    const float fj = ok && fold_into ? param(fold_bias, c) : 0.f;
#pragma unroll
    for (int b = 0; b < NB; ++b) v[b][j] = ok && b < p.B ? __ldcg(slot + b * C + c) : 0.f;
#pragma unroll
    for (int r = 1; r < REPS; ++r)  // the copies the MLP's CTAs added into (zero where none did)
#pragma unroll
      for (int b = 0; b < NB; ++b) v[b][j] += ok && b < p.B ? __ldcg(slot + r * rep_stride + b * C + c) : 0.f;
    if (ok) stage[c] = gj, stage[C + c] = bj, stage[2 * C + c] = fj;
  }
  float mean[NB], rstd[NB];
#pragma unroll
  for (int b = 0; b < NB; ++b) {
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < kMaxColumns; ++j) s += v[b][j];
    s = warp_sum(s);
    if (lane == 0) stats[warp * NB + b] = s;
  }
  consumer_sync();
#pragma unroll
  for (int b = 0; b < NB; ++b) {
    float s = 0.f;
    for (int w = 0; w < kConsumerWarps; ++w) s += stats[w * NB + b];
    mean[b] = s / C;
    float q = 0.f;  // the centred second moment, as torch computes the variance
#pragma unroll
    for (int j = 0; j < kMaxColumns; ++j) {
      const float d = threadIdx.x + j * kConsumers < C ? v[b][j] - mean[b] : 0.f;
      q += d * d;
    }
    q = warp_sum(q);
    if (lane == 0) stats[(kConsumerWarps + warp) * NB + b] = q;
  }
  consumer_sync();
#pragma unroll
  for (int b = 0; b < NB; ++b) {
    float q = 0.f;
    for (int w = 0; w < kConsumerWarps; ++w) q += stats[(kConsumerWarps + w) * NB + b];
    rstd[b] = rsqrtf(q / C + p.eps);
  }
#pragma unroll
  for (int j = 0; j < kMaxColumns; ++j) {
    const int c = threadIdx.x + j * kConsumers;
    if (c >= C) break;
#pragma unroll
    for (int b = 0; b < NB; ++b) {
      xraw[b * C + c] = v[b][j];
      xn[b * C + c] = b < p.B ? (v[b][j] - mean[b]) * rstd[b] * stage[c] + stage[C + c] : 0.f;
      if (fold_into && b < p.B) atomicAdd(fold_into + b * C + c, v[b][j] + stage[2 * C + c]);
    }
  }
  consumer_sync();
}

// A share in PART: o (D floats), m, l, padded so that every share's o starts 16-byte aligned.
__device__ __forceinline__ int share_floats(int D) { return D + 4; }

// One attention item: row b, head h, cache slots [s * split_len, ...) up to pos. Thread (jr, c)
// takes 8 dims (chunk c of D / 8) of slots jr, jr + RP, ...: its q chunk, and up to BatchRows<T>::value
// slots' K and V chunks, load together. The partial softmax -- o = sum p v unnormalised, m (log2
// units), l = sum p -- goes to PART; with y (fused projection) the normalised o goes there instead.
template <typename T>
__device__ void attend(const Params& p, int layer, int b, int h, int s, int pos, float* scratch, float* y) {
  const int C = p.C, H = p.H, D = C / H, DC = D >> 3, RP = kConsumers / DC;
  float* score = scratch;             // split_len
  float* ored = score + p.split_len;  // kConsumerWarps x D
  float* buf = ored + kConsumerWarps * D;  // kConsumerWarps + 1
  const int j0 = s * p.split_len, j1 = min(j0 + p.split_len, pos + 1), n = j1 - j0;
  float* part = p.part + (static_cast<size_t>((b * H + h) * p.splits + s)) * share_floats(D);
  if (n <= 0) {  // past the cache's end: an empty share
    for (int d = threadIdx.x; d < D + 2; d += kConsumers) part[d] = d == D ? -INFINITY : 0.f;
    return;
  }
  const int c = threadIdx.x % DC, jr = threadIdx.x / DC, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const float* qp = p.qkv + b * 3 * C + h * 3 * D + c * 8;
  const float4 qa = __ldcg(reinterpret_cast<const float4*>(qp)), qb = __ldcg(reinterpret_cast<const float4*>(qp) + 1);
  const float qscale = p.scale * kLog2e;
  const float q[8] = {qa.x * qscale, qa.y * qscale, qa.z * qscale, qa.w * qscale,
                      qb.x * qscale, qb.y * qscale, qb.z * qscale, qb.w * qscale};
  const size_t head = ((static_cast<size_t>(layer) * p.B + b) * H + h) * p.W;
  const T* kc = static_cast<const T*>(p.kc) + head * D + c * 8;
  const T* vc = static_cast<const T*>(p.vc) + head * D + c * 8;
  constexpr int R = BatchRows<T>::value;
  const bool one = n <= R * RP;  // every slot's K and V in one round of loads
  Chunk<T> kr[R], vr[R];
  float m = -INFINITY;
  for (int base = 0; base < n; base += R * RP) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int j = j0 + base + r * RP + jr;
      if (j < j1) {
        kr[r].load_cg(kc + static_cast<size_t>(j) * D);
        if (one) vr[r].load_cg(vc + static_cast<size_t>(j) * D);
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int j = j0 + base + r * RP + jr;
      float w[8];
      kr[r].unpack(w);
      float dot = 0.f;
#pragma unroll
      for (int e = 0; e < 8; ++e) dot += q[e] * w[e];
      for (int o = 1; o < DC; o <<= 1) dot += __shfl_xor_sync(kFull, dot, o);
      if (j < j1) {
        if (c == 0) score[j - j0] = dot;
        m = fmaxf(m, dot);
      }
    }
  }
  m = block_reduce(m, buf, true);
  float l = 0.f;
  for (int j = threadIdx.x; j < n; j += kConsumers) {
    const float e = exp2f(score[j] - m);
    score[j] = e;
    l += e;
  }
  l = block_reduce(l, buf, false);  // its syncs also publish the weights in `score`
  float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  for (int base = 0; base < n; base += R * RP) {
    if (!one) {
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int j = j0 + base + r * RP + jr;
        if (j < j1) vr[r].load_cg(vc + static_cast<size_t>(j) * D);
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int j = base + r * RP + jr;
      if (j < n) {
        float w[8];
        vr[r].unpack(w);
        const float pj = score[j];
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[e] += pj * w[e];
      }
    }
  }
  // the sum over jr: lanes of a warp with the same c, then the warps
  for (int o = DC; o < 32; o <<= 1) {
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[e] += __shfl_xor_sync(kFull, acc[e], o);
  }
  if (lane < DC) {
#pragma unroll
    for (int e = 0; e < 8; ++e) ored[warp * D + c * 8 + e] = acc[e];
  }
  consumer_sync();
  for (int d = threadIdx.x; d < D; d += kConsumers) {
    float v = 0.f;
    for (int w = 0; w < kConsumerWarps; ++w) v += ored[w * D + d];
    if (y) y[d] = v / l;
    else part[d] = v;
  }
  if (threadIdx.x == 0 && !y) part[D] = m, part[D + 1] = l;
  consumer_sync();
}

// x[b][h*D + d] = the splits of (row b, head h) combined: their o weighted by 2^(m_s - max m) over
// the same sum of l; rows past B zero.
template <int NB>
__device__ void combine(const Params& p, float* x, float* weight) {
  const int C = p.C, H = p.H, D = C / H, S = p.splits;
  for (int i = threadIdx.x; i < p.B * H * S; i += kConsumers) {  // each share's m, then its weight
    weight[i] = __ldcg(p.part + static_cast<size_t>(i) * share_floats(D) + D);
    weight[p.B * H * S + i] = __ldcg(p.part + static_cast<size_t>(i) * share_floats(D) + D + 1);
  }
  consumer_sync();
  for (int bh = threadIdx.x; bh < p.B * H; bh += kConsumers) {
    float m = -INFINITY, l = 0.f;
    for (int s = 0; s < S; ++s) m = fmaxf(m, weight[bh * S + s]);
    for (int s = 0; s < S; ++s) {
      const float w = exp2f(weight[bh * S + s] - m);
      weight[bh * S + s] = w;
      l += w * weight[p.B * H * S + bh * S + s];
    }
    for (int s = 0; s < S; ++s) weight[bh * S + s] /= l;
  }
  consumer_sync();
  const int C4 = C >> 2;
#pragma unroll 4
  for (int idx = threadIdx.x; idx < NB * C4; idx += kConsumers) {
    const int b = idx / C4, c = (idx % C4) * 4, h = c / D, d = c % D;
    float4 y = make_float4(0.f, 0.f, 0.f, 0.f);
    if (b < p.B) {
      const float* part = p.part + static_cast<size_t>(b * H + h) * S * share_floats(D) + d;
      for (int s = 0; s < S; ++s) {
        const float w = weight[(b * H + h) * S + s];
        const float4 o = __ldcg(reinterpret_cast<const float4*>(part + s * share_floats(D)));
        y.x += w * o.x, y.y += w * o.y, y.z += w * o.z, y.w += w * o.w;
      }
    }
    reinterpret_cast<float4*>(x)[idx] = y;
  }
  consumer_sync();
}

__device__ __forceinline__ unsigned order_key(float f) {  // unsigned order = float order
  const unsigned u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : u | 0x80000000u;
}

// Every row's token for column t, a warp a row (decode/sampling.py's rule: greedy argmax; else
// logits / T, those below the k-th largest dropped, plus the column's Gumbel noise, argmax, the
// first index among equals), then the next step's input, next[b] = wte[token] + wpe[pos + 1].
// z: 2 * B * V floats.
template <typename T>
__device__ void sample(const Params& p, int t, int pos, float* z, float* next) {
  const int V = p.V, warp = threadIdx.x >> 5, lane = threadIdx.x & 31, b = warp;
  if (b < p.B) {
    const float* row = p.logits + (static_cast<size_t>(t) * p.B + b) * V;
    const float* noise = p.greedy ? nullptr : p.noise + (static_cast<size_t>(t) * p.B + b) * V;
    float* zb = z + 2 * b * V;  // the scaled logits, then the noise
#pragma unroll 4
    for (int v = lane; v < V; v += 32) {
      const float x = __ldcg(row + v);
      zb[v] = p.greedy ? x : __fdiv_rn(x, p.temperature);
      zb[V + v] = noise ? __ldcg(noise + v) : 0.f;
    }
    __syncwarp();
    unsigned kth = 0;
    if (!p.greedy && p.top_k > 0 && p.top_k < V) {  // the largest threshold that k keys reach, bit by bit
      for (int bit = 31; bit >= 0; --bit) {
        const unsigned cand = kth | (1u << bit);
        int count = 0;
        for (int v = lane; v < V; v += 32) count += order_key(zb[v]) >= cand;
        for (int o = 16; o > 0; o >>= 1) count += __shfl_xor_sync(kFull, count, o);
        if (count >= p.top_k) kth = cand;
      }
    }
    float best = -INFINITY;
    int arg = 0x7fffffff;
    for (int v = lane; v < V; v += 32) {
      const float x = order_key(zb[v]) >= kth ? zb[v] + zb[V + v] : -INFINITY;
      if (x > best || (x == best && v < arg)) best = x, arg = v;
    }
    for (int o = 16; o > 0; o >>= 1) {
      const float ob = __shfl_xor_sync(kFull, best, o);
      const int oa = __shfl_xor_sync(kFull, arg, o);
      if (ob > best || (ob == best && oa < arg)) best = ob, arg = oa;
    }
    if (arg == 0x7fffffff) arg = 0;  // every score NaN: no token beats another
    if (lane == 0) p.out[static_cast<size_t>(b) * p.total + t] = arg;
    if (pos + 1 < p.W) {  // the run's last step may have no next position
      const T* wte = static_cast<const T*>(p.wte) + static_cast<size_t>(arg) * p.C;
      const T* wpe = static_cast<const T*>(p.wpe) + static_cast<size_t>(pos + 1) * p.C;
#pragma unroll 4
      for (int c = lane; c < p.C; c += 32) next[b * p.C + c] = f32(wte[c]) + f32(wpe[c]);
    }
  }
  consumer_sync();
}

}  // namespace mk
