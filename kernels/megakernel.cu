// decode=megakernel: every decode step of a run -- every layer of every token, the logits and the
// sampling -- in ONE launch of one CTA per SM, in CUDA.
//
// Each CTA has a producer warp and eight consumer warps. The weights do not depend on the
// activations, so the producer streams its CTA's share of them (packed by the host into one
// contiguous stream, in the order the consumers use them: decode/megakernel_plan.py) through a
// ring of shared-memory slots with bulk copies, as far ahead as the ring allows, across the grid
// barriers that stop the consumers. Where a CTA's whole stream fits the ring (the seed GPT in
// bf16), it is loaded once per launch and stays. The consumers do the math from shared memory and
// wait only on activations:
//
//   per layer  A  qkv tiles (LN1 x, rows of W_qkv; k, v into the cache) -> a counter per head
//                 attention items (row, head, split of the cache) -> one counter per layer
//                 proj tiles (the items' partial softmaxes combined, rows of W_o) -> x_mid
//              == grid barrier
//              M  fc tiles: GELU(LN2 x_mid W_fc^T) W_proj2^T, the tile's share added into x_next
//              == grid barrier
//   per token     head tiles (LN_f x, rows of wte) -> logits; the last tile to finish samples
//                 every row (Gumbel-max on the pre-drawn noise) and embeds the next token
//              == grid barrier
//
// Activations are fp32 throughout, in device memory: each step's residual stream in its own set
// of slots (alternating between two sets, so a slot is zeroed a whole step before it is summed
// into). Data other CTAs wrote is read through L2 (ld.global.cg), after an acquire of the counter
// or barrier that published it.
#include <cstdint>
#include <cstdio>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "megakernel.h"

namespace mk {

constexpr int kConsumerWarps = 8;
constexpr int kConsumers = 32 * kConsumerWarps;
constexpr int kThreads = kConsumers + 32;  // the last warp is the producer
constexpr int kPiece = 32768;              // bytes of one bulk copy
constexpr long long kTimeoutNs = 10000000000LL;  // a wait this long is a deadlock: report and trap
constexpr float kLog2e = 1.4426950408889634f;
constexpr unsigned kFull = 0xffffffffu;

// ---- PTX wrappers ---------------------------------------------------------------------------

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ long long globaltimer() {
  long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ void consumer_sync() {  // the consumer warps only: the producer runs free
  asm volatile("bar.sync 1, %0;" ::"n"(kConsumers) : "memory");
}
__device__ __forceinline__ void mbar_init(uint64_t* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}
__device__ __forceinline__ bool mbar_try_wait(uint64_t* bar, unsigned parity) {
  unsigned done;
  asm volatile(
      "{\n\t.reg .pred p;\n\t"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
      "selp.u32 %0, 1, 0, p;\n\t}"
      : "=r"(done)
      : "r"(smem_addr(bar)), "r"(parity)
      : "memory");
  return done != 0;
}
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, unsigned bytes, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
          smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
}
__device__ __forceinline__ unsigned load_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __noinline__ void deadlock(unsigned* err, int code, unsigned seen, unsigned target) {
  printf("megakernel: CTA %d waited 10 s on sync %d (saw %u, waiting for %u): deadlock\n", blockIdx.x, code, seen,
         target);
  atomicExch(err, static_cast<unsigned>(code));
  __trap();
}

// Thread-local spin until *ctr >= target (acquire).
__device__ void spin_until(const unsigned* ctr, unsigned target, unsigned* err, int code) {
  long long start = 0;
  for (int spins = 0;; ++spins) {
    const unsigned seen = load_acquire(ctr);
    if (seen >= target) return;
    if ((spins & 1023) == 1023) {
      const long long now = globaltimer();
      if (start == 0) start = now;
      else if (now - start > kTimeoutNs) deadlock(err, code, seen, target);
    }
  }
}

__device__ void mbar_wait(uint64_t* bar, unsigned parity, unsigned* err, int code) {
  long long start = 0;
  for (int spins = 0; !mbar_try_wait(bar, parity); ++spins) {
    if ((spins & 1023) == 1023) {
      const long long now = globaltimer();
      if (start == 0) start = now;
      else if (now - start > kTimeoutNs) deadlock(err, code, parity, 0);
    }
  }
}

// Every consumer's stores so far published with one release add (the bar.sync orders them before
// thread 0's fence, which is cumulative), as cooperative groups' grid sync does.
__device__ void release_add(unsigned* ctr, unsigned v) {
  consumer_sync();
  if (threadIdx.x == 0) {
    __threadfence();
    atomicAdd(ctr, v);
  }
}
__device__ void acquire_wait(const unsigned* ctr, unsigned target, unsigned* err, int code) {
  if (threadIdx.x == 0) spin_until(ctr, target, err, code);
  consumer_sync();
}
__device__ void grid_sync(unsigned* bar, unsigned k, unsigned* err, long long* prof) {
  release_add(bar, 1);
  if (threadIdx.x == 0) {
    spin_until(bar, k * gridDim.x, err, 1);
    if (prof != nullptr && blockIdx.x == 0) prof[k - 1] = globaltimer();
  }
  consumer_sync();
}

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
__device__ __forceinline__ void load8_cg(const __nv_bfloat16* p, float (&w)[8]) {
  unpack8(__ldcg(reinterpret_cast<const uint4*>(p)), w);
}
__device__ __forceinline__ void load8_cg(const float* p, float (&w)[8]) {
  const float4 a = __ldcg(reinterpret_cast<const float4*>(p)), b = __ldcg(reinterpret_cast<const float4*>(p) + 1);
  w[0] = a.x, w[1] = a.y, w[2] = a.z, w[3] = a.w, w[4] = b.x, w[5] = b.y, w[6] = b.z, w[7] = b.w;
}
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

// ---- the weight ring --------------------------------------------------------------------------

struct Ring {
  uint8_t* base;
  uint64_t* full;
  uint64_t* empty;
  int stage, slots, resident, n_packets;
  long long cur;  // the packet (sequence number over the run) the consumers hold, -1 before the first
};

// The shared-memory address of a block at `offset` in packet `packet` of step `step`: moving to a
// new packet hands the one held back to the producer and waits for the new one to land.
__device__ const uint8_t* ring_block(Ring& ring, int step, int packet, int offset, unsigned* err) {
  const long long seq = ring.resident ? 0 : static_cast<long long>(step) * ring.n_packets + packet;
  if (seq != ring.cur) {
    if (!ring.resident && ring.cur >= 0) {
      consumer_sync();  // every consumer is done with the held packet
      if (threadIdx.x == 0) mbar_arrive(&ring.empty[ring.cur % ring.slots]);
    }
    mbar_wait(&ring.full[seq % ring.slots], ring.resident ? 0u : static_cast<unsigned>((seq / ring.slots) & 1), err,
              2);
    ring.cur = seq;
  }
  return ring.base + (seq % ring.slots) * ring.stage + offset;
}

__device__ void produce(const Params& p, const int* cta, Ring& ring) {
  const int np = cta[kCtaPackets];
  if (np == 0) return;
  const uint8_t* src = p.packed + static_cast<size_t>(cta[kCtaSource]) * 16;
  const int steps = ring.resident ? 1 : p.n_steps;
  long long seq = 0;
  for (int step = 0; step < steps; ++step) {
    for (int q = 0; q < np; ++q, ++seq) {
      const int slot = static_cast<int>(seq % ring.slots);
      if (seq >= ring.slots) mbar_wait(&ring.empty[slot], static_cast<unsigned>((seq / ring.slots - 1) & 1), p.sync + 2, 3);
      const int bytes = q == np - 1 ? cta[kCtaLastBytes] : ring.stage;
      mbar_expect_tx(&ring.full[slot], bytes);
      for (int off = 0; off < bytes; off += kPiece)
        bulk_copy(ring.base + static_cast<size_t>(slot) * ring.stage + off, src + static_cast<size_t>(q) * ring.stage + off,
                  min(kPiece, bytes - off), &ring.full[slot]);
    }
  }
}

// ---- the phases -------------------------------------------------------------------------------

// xraw = the stream slot (B rows of C, zero rows up to NB); xn = its LayerNorm (g, beta).
template <typename T, int NB>
__device__ void load_norm(const Params& p, const float* slot, const T* g, const T* beta, float* xraw, float* xn,
                          float* stats) {
  const int C = p.C, C4 = C >> 2;
  for (int idx = threadIdx.x; idx < NB * C4; idx += kConsumers) {
    const int b = idx / C4;
    const float4 v = b < p.B ? __ldcg(reinterpret_cast<const float4*>(slot) + idx) : make_float4(0.f, 0.f, 0.f, 0.f);
    reinterpret_cast<float4*>(xraw)[idx] = v;
  }
  consumer_sync();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (warp < NB) {  // a warp a row: the mean, then the centred second moment (two passes, as torch)
    float s = 0.f;
    for (int c = lane; c < C; c += 32) s += xraw[warp * C + c];
    const float mean = warp_sum(s) / C;
    float q = 0.f;
    for (int c = lane; c < C; c += 32) {
      const float d = xraw[warp * C + c] - mean;
      q += d * d;
    }
    const float var = warp_sum(q) / C;
    if (lane == 0) stats[2 * warp] = mean, stats[2 * warp + 1] = rsqrtf(var + p.eps);
  }
  consumer_sync();
  for (int idx = threadIdx.x; idx < NB * C; idx += kConsumers) {
    const int b = idx / C, c = idx % C;
    xn[idx] = b < p.B ? (xraw[idx] - stats[2 * b]) * stats[2 * b + 1] * f32(g[c]) + param(beta, c) : 0.f;
  }
  consumer_sync();
}

// One attention item: row b, head h, cache slots [s * split_len, ...) up to pos. Writes the
// partial softmax (o = sum p v unnormalised, then m in log2 units, then l = sum p) to PART.
template <typename T>
__device__ void attend(const Params& p, int layer, int b, int h, int s, int pos, float* scratch) {
  const int C = p.C, H = p.H, D = C / H, W = p.W;
  float* q = scratch;              // D
  float* buf = q + D;              // kConsumerWarps + 1
  float* score = buf + 16;         // split_len
  float* ored = score + p.split_len;  // (kConsumers / (D / 8)) * D
  const int j0 = s * p.split_len, j1 = min(j0 + p.split_len, pos + 1);
  float* part = p.part + (static_cast<size_t>((b * H + h) * p.splits + s)) * (D + 2);
  if (j0 >= j1) {  // past the cache's end: an empty share
    for (int d = threadIdx.x; d < D + 2; d += kConsumers) part[d] = d == D ? -INFINITY : 0.f;
    return;
  }
  const float qscale = p.scale * kLog2e;
  for (int d = threadIdx.x; d < D; d += kConsumers) q[d] = __ldcg(p.qkv + b * 3 * C + h * 3 * D + d) * qscale;
  consumer_sync();
  const size_t head = ((static_cast<size_t>(layer) * p.B + b) * H + h) * W;
  const T* kc = static_cast<const T*>(p.kc) + head * D;
  const T* vc = static_cast<const T*>(p.vc) + head * D;
  float m = -INFINITY;
  for (int j = j0 + threadIdx.x; j < j1; j += kConsumers) {
    float sc = 0.f;
    for (int c = 0; c < D; c += 8) {
      float w[8];
      load8_cg(kc + static_cast<size_t>(j) * D + c, w);
#pragma unroll
      for (int e = 0; e < 8; ++e) sc += q[c + e] * w[e];
    }
    score[j - j0] = sc;
    m = fmaxf(m, sc);
  }
  m = block_reduce(m, buf, true);
  float l = 0.f;
  for (int j = j0 + threadIdx.x; j < j1; j += kConsumers) {
    const float e = exp2f(score[j - j0] - m);
    score[j - j0] = e;
    l += e;
  }
  l = block_reduce(l, buf, false);  // its syncs also publish the weights in `score`
  const int DC = D >> 3, groups = kConsumers / DC;
  const int dc = threadIdx.x % DC, g = threadIdx.x / DC;
  float o[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  if (g < groups) {
    for (int j = j0 + g; j < j1; j += groups) {
      float w[8];
      load8_cg(vc + static_cast<size_t>(j) * D + dc * 8, w);
      const float pj = score[j - j0];
#pragma unroll
      for (int e = 0; e < 8; ++e) o[e] += pj * w[e];
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) ored[g * D + dc * 8 + e] = o[e];
  }
  consumer_sync();
  for (int d = threadIdx.x; d < D; d += kConsumers) {
    float v = 0.f;
    for (int gg = 0; gg < groups; ++gg) v += ored[gg * D + d];
    part[d] = v;
  }
  if (threadIdx.x == 0) part[D] = m, part[D + 1] = l;
  consumer_sync();
}

// y[b][h*D + d] = the softmax-weighted sum over every split of (row b, head h), into x (NB x C).
__device__ void combine(const Params& p, float* x, float* weight) {
  const int C = p.C, H = p.H, D = C / H, S = p.splits;
  for (int bh = threadIdx.x; bh < p.B * H; bh += kConsumers) {
    const float* part = p.part + static_cast<size_t>(bh) * S * (D + 2);
    float m = -INFINITY;
    for (int s = 0; s < S; ++s) m = fmaxf(m, __ldcg(part + s * (D + 2) + D));
    float l = 0.f;
    for (int s = 0; s < S; ++s) {
      const float w = exp2f(__ldcg(part + s * (D + 2) + D) - m);
      weight[bh * S + s] = w;
      l += w * __ldcg(part + s * (D + 2) + D + 1);
    }
    for (int s = 0; s < S; ++s) weight[bh * S + s] /= l;
  }
  consumer_sync();
  for (int idx = threadIdx.x; idx < p.B * C; idx += kConsumers) {
    const int b = idx / C, c = idx % C, h = c / D, d = c % D;
    const float* part = p.part + static_cast<size_t>(b * H + h) * S * (D + 2) + d;
    float y = 0.f;
    for (int s = 0; s < S; ++s) y += weight[(b * H + h) * S + s] * __ldcg(part + s * (D + 2));
    x[idx] = y;
  }
  consumer_sync();
}

// The argmax (first index among equals) over v[0..V); every consumer gets it.
__device__ int block_argmax(const float* v, int V, float* fbuf, int* ibuf) {
  float best = -INFINITY;
  int arg = 0x7fffffff;
  for (int i = threadIdx.x; i < V; i += kConsumers) {
    if (v[i] > best || (v[i] == best && i < arg)) best = v[i], arg = i;
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float ob = __shfl_xor_sync(kFull, best, o);
    const int oa = __shfl_xor_sync(kFull, arg, o);
    if (ob > best || (ob == best && oa < arg)) best = ob, arg = oa;
  }
  if ((threadIdx.x & 31) == 0) fbuf[threadIdx.x >> 5] = best, ibuf[threadIdx.x >> 5] = arg;
  consumer_sync();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kConsumerWarps; ++w) {
      if (fbuf[w] > fbuf[0] || (fbuf[w] == fbuf[0] && ibuf[w] < ibuf[0])) fbuf[0] = fbuf[w], ibuf[0] = ibuf[w];
    }
  }
  consumer_sync();
  const int r = ibuf[0];
  consumer_sync();
  return r;
}

__device__ __forceinline__ unsigned order_key(float f) {  // unsigned order = float order
  const unsigned u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : u | 0x80000000u;
}

// Row b's token for column t (decode/sampling.py's rule: greedy argmax; else logits / T, those
// below the k-th largest dropped, plus the column's Gumbel noise, argmax), then the next input.
template <typename T>
__device__ void sample_row(const Params& p, int b, int t, int pos, float* z, float* buf, int* ibuf, float* next) {
  const int V = p.V;
  const float* row = p.logits + (static_cast<size_t>(t) * p.B + b) * V;
  for (int v = threadIdx.x; v < V; v += kConsumers) {
    const float x = __ldcg(row + v);
    z[v] = p.greedy ? x : __fdiv_rn(x, p.temperature);
  }
  consumer_sync();
  if (!p.greedy && p.top_k > 0 && p.top_k < V) {
    // the k-th largest key, bit by bit from the top: the largest threshold that k keys reach
    unsigned kth = 0;
    for (int bit = 31; bit >= 0; --bit) {
      const unsigned cand = kth | (1u << bit);
      float n = 0.f;
      for (int v = threadIdx.x; v < V; v += kConsumers) n += order_key(z[v]) >= cand ? 1.f : 0.f;
      if (block_reduce(n, buf, false) >= p.top_k) kth = cand;
    }
    for (int v = threadIdx.x; v < V; v += kConsumers)
      if (order_key(z[v]) < kth) z[v] = -INFINITY;
    consumer_sync();
  }
  if (!p.greedy) {
    const float* noise = p.noise + (static_cast<size_t>(t) * p.B + b) * V;
    for (int v = threadIdx.x; v < V; v += kConsumers) z[v] += __ldcg(noise + v);
    consumer_sync();
  }
  const int token = block_argmax(z, V, buf, ibuf);
  if (threadIdx.x == 0) p.out[static_cast<size_t>(b) * p.total + t] = token;
  if (pos + 1 < p.W) {  // the next step's input; the run's last step may have none
    const T* wte = static_cast<const T*>(p.wte) + static_cast<size_t>(token) * p.C;
    const T* wpe = static_cast<const T*>(p.wpe) + static_cast<size_t>(pos + 1) * p.C;
    for (int c = threadIdx.x; c < p.C; c += kConsumers) next[b * p.C + c] = f32(wte[c]) + f32(wpe[c]);
  }
  consumer_sync();
}

// ---- the kernel -------------------------------------------------------------------------------

template <typename T, int NB>
__global__ void __launch_bounds__(kThreads, 1) decode_run(const Params p) {
  extern __shared__ __align__(128) uint8_t smem[];
  const int* cta = p.cta + blockIdx.x * kCtaRecord;
  const int C = p.C, H = p.H, D = C / H, L = p.L, B = p.B;
  Ring ring;
  ring.base = smem;
  ring.stage = p.stage, ring.slots = p.slots, ring.resident = p.resident, ring.n_packets = cta[kCtaPackets];
  ring.cur = -1;
  ring.full = reinterpret_cast<uint64_t*>(smem + static_cast<size_t>(p.slots) * p.stage);
  ring.empty = ring.full + p.slots;
  float* xn = reinterpret_cast<float*>(ring.empty + p.slots);  // NB x C: a phase's input
  float* xraw = xn + NB * C;                                   // NB x C: the slot it was made from
  float* u = xraw + NB * C;                                    // NB x rf: an fc tile's hidden units
  float* scratch = u + NB * p.rf;                              // the products' sums, attention, sampling
  float* stats = scratch + p.scratch;                          // 64 floats
  int* flag = reinterpret_cast<int*>(stats + 48);
  if (threadIdx.x == 0) {
    for (int i = 0; i < p.slots; ++i) mbar_init(&ring.full[i], 1), mbar_init(&ring.empty[i], 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (threadIdx.x >= kConsumers) {  // the producer warp: one lane streams the CTA's weights
    if (threadIdx.x == kConsumers) produce(p, cta, ring);
    return;
  }
  unsigned* err = p.sync + 2;
  unsigned* count_qkv = p.sync + kSyncCounters;
  unsigned* count_att = count_qkv + L * H;
  const int t0 = static_cast<int>(*p.t_ptr), pos0 = static_cast<int>(*p.pos_ptr);
  const size_t slot_elems = static_cast<size_t>(B) * C;
  const size_t set_elems = (2 * L + 1) * slot_elems;  // one step's slots
  if (blockIdx.x == 0) {  // the first input: the token the prefill sampled last
    for (int idx = threadIdx.x; idx < B * C; idx += kConsumers) {
      const int b = idx / C, c = idx % C;
      const int64_t token = p.out[static_cast<size_t>(b) * p.total + t0 - 1];
      p.x[idx] = f32(static_cast<const T*>(p.wte)[token * C + c]) + f32(static_cast<const T*>(p.wpe)[static_cast<size_t>(pos0) * C + c]);
    }
  }
  const int4* tiles = p.tiles;
  const int4* blocks = p.blocks + cta[kCtaBlocks];
  const int n_qkv = cta[kCtaQkv + 1], n_att = cta[kCtaAtt + 1], n_proj = cta[kCtaProj + 1];
  const int n_fc = cta[kCtaFc + 1], n_head = cta[kCtaHead + 1];
  unsigned k = 0;  // grid barriers passed
  for (int i = 0; i < p.n_steps; ++i) {
    const int t = t0 + i, pos = pos0 + i;
    float* X = p.x + (i & 1) * set_elems;
    float* X_next = p.x + ((i + 1) & 1) * set_elems;
    grid_sync(p.sync, ++k, err, p.prof);  // this step's input is in slot 0
    // the other set's summed slots (2, 4, .., 2L) start the next step at zero
    for (size_t idx = blockIdx.x * kConsumers + threadIdx.x; idx < L * slot_elems; idx += gridDim.x * kConsumers) {
      const size_t l = idx / slot_elems;
      X_next[(2 * l + 2) * slot_elems + idx % slot_elems] = 0.f;
    }
    int bi = 0;  // this step's next block
    for (int l = 0; l < L; ++l) {
      const float* x_l = X + 2 * l * slot_elems;
      float* x_mid = X + (2 * l + 1) * slot_elems;
      float* x_out = X + (2 * l + 2) * slot_elems;
      const T* ln1_w = static_cast<const T*>(p.ln1_w) + l * C;
      const T* ln1_b = p.ln1_b ? static_cast<const T*>(p.ln1_b) + l * C : nullptr;
      // A: qkv tiles
      if (n_qkv > 0) load_norm<T, NB>(p, x_l, ln1_w, ln1_b, xraw, xn, stats);
      for (int q = 0; q < n_qkv; ++q) {
        const int4 tile = tiles[cta[kCtaQkv] + q];  // head, first row within the head's 3D, rows
        const int h = tile.x;
        const T* bias = p.b_qkv ? static_cast<const T*>(p.b_qkv) + l * 3 * C + h * 3 * D : nullptr;
        for (int done = 0; done < tile.z;) {
          const int4 blk = blocks[bi++];
          const T* w = reinterpret_cast<const T*>(ring_block(ring, i, blk.x, blk.y, err));
          const int r0 = tile.y + blk.w;
          block_matvec<T, NB>(w, blk.z, C, xn, C, scratch, [&](int r, int b, float v) {
            if (b >= B) return;
            const int row = r0 + r;  // within the head: q 0..D, k D..2D, v 2D..3D
            v += param(bias, row);
            p.qkv[b * 3 * C + h * 3 * D + row] = v;
            if (row >= D) {
              const size_t at = (((static_cast<size_t>(l) * B + b) * H + h) * p.W + pos) * D + (row % D);
              store(static_cast<T*>(row < 2 * D ? p.kc : p.vc) + at, v);
            }
          });
          done += blk.z;
        }
        release_add(count_qkv + l * H + h, 1);
      }
      // A: attention items, each once its head's q, k and v are all written
      for (int a = 0; a < n_att; ++a) {
        const int4 item = tiles[cta[kCtaAtt] + a];  // row, head, split
        acquire_wait(count_qkv + l * H + item.y, (i + 1) * p.tq, err, 4);
        attend<T>(p, l, item.x, item.y, item.z, pos, scratch);
      }
      if (n_att > 0) release_add(count_att + l, n_att);
      // A: proj tiles, once every item of the layer is in: x_mid = x_l + y W_o^T + b_o
      if (n_proj > 0) {
        acquire_wait(count_att + l, (i + 1) * p.n_att, err, 5);
        combine(p, xn, scratch);
        for (int b = B; b < NB; ++b)
          for (int c = threadIdx.x; c < C; c += kConsumers) xn[b * C + c] = 0.f;
        consumer_sync();
      }
      const T* b_o = p.b_o ? static_cast<const T*>(p.b_o) + l * C : nullptr;
      for (int q = 0; q < n_proj; ++q) {
        const int4 tile = tiles[cta[kCtaProj] + q];  // first row, rows
        for (int done = 0; done < tile.y;) {
          const int4 blk = blocks[bi++];
          const T* w = reinterpret_cast<const T*>(ring_block(ring, i, blk.x, blk.y, err));
          const int r0 = tile.x + blk.w;
          block_matvec<T, NB>(w, blk.z, C, xn, C, scratch, [&](int r, int b, float v) {
            if (b >= B) return;
            const int row = r0 + r;
            x_mid[b * C + row] = __ldcg(x_l + b * C + row) + param(b_o, row) + v;
          });
          done += blk.z;
        }
      }
      grid_sync(p.sync, ++k, err, p.prof);  // x_mid is whole
      // M: x_out = x_mid + b_proj2 + sum over the fc tiles of GELU(LN2(x_mid) W_fc^T + b_fc) W_proj2^T
      const T* ln2_w = static_cast<const T*>(p.ln2_w) + l * C;
      const T* ln2_b = p.ln2_b ? static_cast<const T*>(p.ln2_b) + l * C : nullptr;
      const T* b_fc = p.b_fc ? static_cast<const T*>(p.b_fc) + l * 4 * C : nullptr;
      const T* b_p2 = p.b_p2 ? static_cast<const T*>(p.b_p2) + l * C : nullptr;
      if (n_fc > 0 || blockIdx.x == 0) load_norm<T, NB>(p, x_mid, ln2_w, ln2_b, xraw, xn, stats);
      if (blockIdx.x == 0) {  // the residual term and the bias, once
        for (int idx = threadIdx.x; idx < B * C; idx += kConsumers) atomicAdd(x_out + idx, xraw[idx] + param(b_p2, idx % C));
      }
      for (int q = 0; q < n_fc; ++q) {
        const int4 tile = tiles[cta[kCtaFc] + q];  // first hidden unit, units
        for (int done = 0; done < tile.y;) {
          const int4 blk = blocks[bi++];
          const T* w = reinterpret_cast<const T*>(ring_block(ring, i, blk.x, blk.y, err));
          const int r0 = blk.w;
          block_matvec<T, NB>(w, blk.z, C, xn, C, scratch, [&](int r, int b, float v) {
            v += param(b_fc, tile.x + r0 + r);
            u[b * p.rf + r0 + r] = b < B ? 0.5f * v * (1.f + erff(v * 0.70710678118654752f)) : 0.f;
          });
          done += blk.z;
        }
        float acc[NB][8];
#pragma unroll
        for (int b = 0; b < NB; ++b)
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[b][e] = 0.f;
        for (int done = 0; done < tile.y;) {
          const int4 blk = blocks[bi++];
          const T* w = reinterpret_cast<const T*>(ring_block(ring, i, blk.x, blk.y, err));
          block_axpy<T, NB>(w, blk.z, C, u, p.rf, blk.w, acc);
          done += blk.z;
        }
        if (threadIdx.x < (C >> 3)) {
#pragma unroll
          for (int b = 0; b < NB; ++b) {
            if (b >= B) break;
            float4* dst = reinterpret_cast<float4*>(x_out + b * C + threadIdx.x * 8);
            atomicAdd(dst, make_float4(acc[b][0], acc[b][1], acc[b][2], acc[b][3]));
            atomicAdd(dst + 1, make_float4(acc[b][4], acc[b][5], acc[b][6], acc[b][7]));
          }
        }
        consumer_sync();  // u is rewritten by the next tile
      }
      grid_sync(p.sync, ++k, err, p.prof);  // x_out is whole
    }
    // the head: logits = LN_f(x_L) wte^T, then the last tile in samples every row
    if (n_head > 0) {
      const float* x_last = X + 2 * L * slot_elems;
      load_norm<T, NB>(p, x_last, static_cast<const T*>(p.lnf_w), static_cast<const T*>(p.lnf_b), xraw, xn, stats);
      for (int q = 0; q < n_head; ++q) {
        const int4 tile = tiles[cta[kCtaHead] + q];  // first vocabulary row, rows
        for (int done = 0; done < tile.y;) {
          const int4 blk = blocks[bi++];
          const T* w = reinterpret_cast<const T*>(ring_block(ring, i, blk.x, blk.y, err));
          const int r0 = tile.x + blk.w;
          block_matvec<T, NB>(w, blk.z, C, xn, C, scratch, [&](int r, int b, float v) {
            if (b < B) p.logits[(static_cast<size_t>(t) * B + b) * p.V + r0 + r] = v;
          });
          done += blk.z;
        }
      }
      consumer_sync();
      if (threadIdx.x == 0) {
        __threadfence();
        const unsigned before = atomicAdd(p.sync + 1, static_cast<unsigned>(n_head));
        __threadfence();
        *flag = before + n_head == static_cast<unsigned>((i + 1) * p.n_head_tiles);
      }
      consumer_sync();
      if (*flag) {  // every logit of the step is written: this CTA samples
        for (int b = 0; b < B; ++b) sample_row<T>(p, b, t, pos, scratch, stats, flag + 1, X_next);
      }
    }
  }
  grid_sync(p.sync, ++k, err, p.prof);  // the last step's sampling is done (and its stamp taken)
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    *p.t_ptr = t0 + p.n_steps;
    *p.pos_ptr = pos0 + p.n_steps;
  }
}

// n empty grid barriers: what one costs on this grid (program 0's stamps in prof).
__global__ void __launch_bounds__(kThreads, 1) barrier_run(unsigned* sync, long long* prof, int n) {
  if (threadIdx.x >= kConsumers) return;
  for (int k = 1; k <= n; ++k) grid_sync(sync, k, sync + 2, prof);
}

template <typename T, int NB>
cudaError_t launch_typed(const Params& p, int grid, size_t smem, cudaStream_t stream) {
  auto kernel = decode_run<T, NB>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (e != cudaSuccess) return e;
  void* args[] = {const_cast<Params*>(&p)};
  return cudaLaunchCooperativeKernel(reinterpret_cast<void*>(kernel), dim3(grid), dim3(kThreads), args, smem, stream);
}

template <typename T>
cudaError_t launch_nb(const Params& p, int nb, int grid, size_t smem, cudaStream_t stream) {
  switch (nb) {
    case 1: return launch_typed<T, 1>(p, grid, smem, stream);
    case 2: return launch_typed<T, 2>(p, grid, smem, stream);
    case 4: return launch_typed<T, 4>(p, grid, smem, stream);
    case 8: return launch_typed<T, 8>(p, grid, smem, stream);
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t launch(const Params& p, bool bf16, int nb, int grid, size_t smem, cudaStream_t stream) {
  return bf16 ? launch_nb<__nv_bfloat16>(p, nb, grid, smem, stream) : launch_nb<float>(p, nb, grid, smem, stream);
}

cudaError_t launch_barriers(unsigned* sync, long long* prof, int n, int grid, cudaStream_t stream) {
  void* args[] = {&sync, &prof, &n};
  return cudaLaunchCooperativeKernel(reinterpret_cast<void*>(barrier_run), dim3(grid), dim3(kThreads), args, 0, stream);
}

int max_shared_memory(int device) {
  int v = 0;
  cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  return v;
}

}  // namespace mk
