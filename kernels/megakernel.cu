// decode=megakernel: every decode step of a run -- every layer of every token, the logits and the
// sampling -- in ONE launch of one CTA per SM, in CUDA.
//
// Each CTA has eight warps. The weights do not depend on the activations, so the CTA's share of
// them (packed by the host into one contiguous stream, in the order the threads use them:
// decode/megakernel_plan.py) streams through a ring of shared-memory slots with bulk copies, as
// many packets ahead as the ring has slots, across the grid barriers: a slot is refilled as soon
// as it is freed. Where a CTA's whole stream fits the ring (the seed GPT in bf16), it is loaded
// once per launch and stays. The threads do the math from shared memory and wait only on
// activations:
//
//   per layer  A  qkv tiles (LN1 x, rows of W_qkv; k, v into the cache) -> a counter per head
//                 attention items (row, head, split of the cache) -> one counter per layer
//                 proj tiles (the items' partial softmaxes combined, rows of W_o) -> x_mid
//                 (fused, at batch 1: an item per head over the whole cache adds its head's
//                 share of the projection into x_mid itself -- one hand-over fewer a layer)
//              == grid barrier
//              M  fc tiles: GELU(LN2 x_mid W_fc^T) W_proj2^T, the tile's share added into x_next
//              == grid barrier
//   per token     head tiles (LN_f x, rows of wte) -> logits; the last tile to finish samples
//                 every row (Gumbel-max on the pre-drawn noise) and embeds the next token
//              == grid barrier
//
// Activations are fp32 throughout, in device memory: each step's residual stream in its own set
// of slots (alternating between two sets, so a slot is zeroed a whole step before it is summed
// into). Every CTA adds its MLP share into the same C floats of a row; 132 CTAs' atomics queued
// on the same addresses cost about 0.9 us more than a grid barrier alone on the H200, so a slot
// comes in REPS copies that the CTAs add into by turns, and its reader sums them (one round of
// loads: the copies cost it little). Data other CTAs wrote is read through L2 (ld.global.cg),
// after an acquire of the counter or barrier that published it.
//
// A CTA's schedule (its record, tiles and blocks) and its tiles' biases for every layer are copied
// into shared memory at the start, so that no phase waits on a global load for them before its
// products can start (shared memory leaves L1 too small to keep them).
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "megakernel.h"
#include "megakernel_math.cuh"
#include "megakernel_phases.cuh"
#include "megakernel_sync.cuh"

namespace mk {

template <typename T> __device__ __forceinline__ const T* layer_vec(const void* v, int layer, int n) {
  return v ? static_cast<const T*>(v) + static_cast<size_t>(layer) * n : nullptr;
}

// f(block, its weights in shared memory) for each of a tile's blocks, the next ones in this
// CTA's stream (blocks[bi], bi advanced), until they cover `rows` rows.
template <typename T, class F>
__device__ __forceinline__ void each_block(Ring& ring, const int4* blocks, int& bi, int step, int rows, unsigned* err,
                                           F f) {
  for (int done = 0; done < rows;) {
    const int4 blk = blocks[bi++];
    f(blk, reinterpret_cast<const T*>(ring_block(ring, step, blk.x, blk.y, err)));
    done += blk.z;
  }
}

// The copies of a stream slot the MLP's CTAs add into: at batch 1 eight, fewer where a CTA's
// rows already spread its atomics (kernels/megakernel.py sizes the slots by the same rule).
template <int NB> __host__ __device__ constexpr int reps_for() { return NB >= 8 ? 1 : 8 / NB; }

// bias[nb ..] = vec[first ..] for `rows` rows (null vec: zeros); returns nb + rows.
template <typename T> __device__ __forceinline__ int load_bias(float* bias, int nb, const T* vec, int first, int rows) {
  for (int r = threadIdx.x; r < rows; r += kConsumers) bias[nb + r] = param(vec, first + r);
  return nb + rows;
}

template <typename T, int NB>
__global__ void __launch_bounds__(kThreads, 1) decode_run(const Params p) {
  extern __shared__ __align__(128) uint8_t smem[];
  constexpr int REPS = reps_for<NB>();
  const int* gcta = p.cta + blockIdx.x * kCtaRecord;
  const int C = p.C, H = p.H, D = C / H, L = p.L, B = p.B;
  Ring ring;
  ring.base = smem;
  ring.stage = gcta[kCtaStage], ring.slots = gcta[kCtaSlots], ring.resident = gcta[kCtaResident];
  ring.n_packets = gcta[kCtaPackets], ring.last_bytes = gcta[kCtaLastBytes];
  ring.src = p.packed + static_cast<size_t>(gcta[kCtaSource]) * 16;
  ring.total = ring.n_packets == 0 ? 0 : ring.resident ? 1 : static_cast<long long>(p.n_steps) * ring.n_packets;
  ring.cur = -1;
  ring.full = reinterpret_cast<uint64_t*>(smem + p.ring_bytes);
  float* xn = reinterpret_cast<float*>(ring.full + 2 * kMaxSlots);  // NB x C: a phase's input
  float* xraw = xn + NB * C;                                   // NB x C: the slot it was made from
  float* u = xraw + NB * C;                                    // NB x rf: an fc tile's hidden units
  float* bias_all = u + NB * p.rf;                             // 2L x bias_rows: each phase's tiles' biases
  float* stats = bias_all + 2 * L * p.bias_rows;               // kStats floats
  float* scratch = stats + kStats;                             // the products' sums, attention, sampling
  int* flag = reinterpret_cast<int*>(scratch + p.scratch);
  // the schedule: the record with its tile and block indices made this CTA's own, then its tiles
  // and its blocks (16-byte aligned after the flag)
  int* cta = reinterpret_cast<int*>((reinterpret_cast<uintptr_t>(flag + 1) + 15) & ~uintptr_t(15));
  int4* tiles = reinterpret_cast<int4*>(cta + kCtaRecord);
  const int tile0 = gcta[kCtaQkv], n_tiles = gcta[kCtaHead] + gcta[kCtaHead + 1] - tile0;
  int4* blocks = tiles + n_tiles;
  for (int idx = threadIdx.x; idx < kCtaRecord; idx += kThreads) {
    const bool first_tile = idx >= kCtaQkv && idx <= kCtaHead && idx % 2 == 0;
    cta[idx] = gcta[idx] - (first_tile ? tile0 : idx == kCtaBlocks ? gcta[kCtaBlocks] : 0);
  }
  for (int idx = threadIdx.x; idx < n_tiles; idx += kThreads) tiles[idx] = p.tiles[tile0 + idx];
  for (int idx = threadIdx.x; idx < gcta[kCtaNumBlocks]; idx += kThreads) blocks[idx] = p.blocks[gcta[kCtaBlocks] + idx];
  if (threadIdx.x == 0) {
    for (int i = 0; i < ring.slots; ++i) mbar_init(&ring.full[i], 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    fill_first(ring);
  }
  __syncthreads();
  unsigned* err = p.sync + 2;
  unsigned* count_qkv = p.sync + kSyncCounters;
  unsigned* count_att = count_qkv + L * H;
  const int t0 = static_cast<int>(*p.t_ptr), pos0 = static_cast<int>(*p.pos_ptr);
  const size_t slot_elems = static_cast<size_t>(B) * C;  // one copy of a slot
  const size_t slot_stride = REPS * slot_elems;
  const size_t set_elems = (2 * L + 1) * slot_stride;  // one step's slots
  const T* wte = static_cast<const T*>(p.wte);
  const T* wpe = static_cast<const T*>(p.wpe);
  if (blockIdx.x == 0) {  // the first input: the token the prefill sampled last
    for (int idx = threadIdx.x; idx < B * C; idx += kConsumers) {
      const int b = idx / C, c = idx % C;
      const int64_t token = p.out[static_cast<size_t>(b) * p.total + t0 - 1];
      p.x[idx] = f32(wte[token * C + c]) + f32(wpe[static_cast<size_t>(pos0) * C + c]);
    }
  }
  const int n_qkv = cta[kCtaQkv + 1], n_att = cta[kCtaAtt + 1], n_proj = cta[kCtaProj + 1];
  const int n_fc = cta[kCtaFc + 1], n_head = cta[kCtaHead + 1];
  const bool first = blockIdx.x == 0;  // adds each phase's residual term
  for (int l = 0; l < L; ++l) {  // every layer's biases of this CTA's tiles, in the order its phases read them
    float* bias_a = bias_all + 2 * l * p.bias_rows;
    int nb = 0;
    for (int q = 0; q < n_qkv; ++q) {
      const int4 tile = tiles[cta[kCtaQkv] + q];
      nb = load_bias(bias_a, nb, layer_vec<T>(p.b_qkv, l, 3 * C), tile.x * 3 * D + tile.y, tile.z);
    }
    for (int q = 0; q < n_proj; ++q)
      nb = load_bias(bias_a, nb, layer_vec<T>(p.b_o, l, C), tiles[cta[kCtaProj] + q].x, tiles[cta[kCtaProj] + q].y);
    nb = 0;
    for (int q = 0; q < n_fc; ++q)
      nb = load_bias(bias_a + p.bias_rows, nb, layer_vec<T>(p.b_fc, l, 4 * C), tiles[cta[kCtaFc] + q].x,
                     tiles[cta[kCtaFc] + q].y);
  }
  unsigned k = 0;  // grid barriers passed
  for (int i = 0; i < p.n_steps; ++i) {
    const int t = t0 + i, pos = pos0 + i;
    float* X = p.x + (i & 1) * set_elems;
    float* X_next = p.x + ((i + 1) & 1) * set_elems;
    grid_sync(p.sync, ++k, err, p.prof);  // this step's input is in slot 0
    // the other set's slots 1 .. 2L start the next step at zero (the phases add into them)
    for (size_t idx = blockIdx.x * kConsumers + threadIdx.x; idx < 2 * L * slot_stride; idx += gridDim.x * kConsumers)
      X_next[slot_stride + idx] = 0.f;
    int bi = 0;  // this step's next block
    for (int l = 0; l < L; ++l) {
      const float* x_l = X + 2 * l * slot_stride;
      float* x_mid = X + (2 * l + 1) * slot_stride;
      float* x_out = X + (2 * l + 2) * slot_stride;
      const T* b_o = layer_vec<T>(p.b_o, l, C);
      const float* bias = bias_all + 2 * l * p.bias_rows;  // A: this CTA's qkv rows', then its proj rows'
      if (n_qkv > 0 || n_proj > 0 || (p.fused && first))
        load_norm<T, NB, REPS>(p, x_l, slot_elems, layer_vec<T>(p.ln1_w, l, C), layer_vec<T>(p.ln1_b, l, C), xraw, xn, stats,
                         scratch, p.fused && first ? x_mid : nullptr, b_o);
      // A: qkv tiles; each counts itself done on its head's counter
      int nb = 0;
      for (int q = 0; q < n_qkv; ++q) {
        const int4 tile = tiles[cta[kCtaQkv] + q];  // head, first row within the head's 3D, rows
        const int h = tile.x;
        each_block<T>(ring, blocks, bi, i, tile.z, err, [&](int4 blk, const T* w) {
          const int r0 = tile.y + blk.w;
          const float* bias_blk = bias + nb + blk.w;
          block_matvec<T, NB>(w, blk.z, C, xn, C, scratch, [&](int r, int b, float v) {
            if (b >= B) return;
            const int row = r0 + r;  // within the head: q 0..D, k D..2D, v 2D..3D
            v += bias_blk[r];
            p.qkv[b * 3 * C + h * 3 * D + row] = v;
            if (row >= D) {
              const size_t at = (((static_cast<size_t>(l) * B + b) * H + h) * p.W + pos) * D + (row % D);
              store(static_cast<T*>(row < 2 * D ? p.kc : p.vc) + at, v);
            }
          });
        });
        nb += tile.z;
        release_add(count_qkv + l * H + h, 1);
      }
      // A: attention items, each once its head's q, k and v are all written; fused: the item
      // also adds its head's share of the projection, y_h W_o[:, h]^T, into x_mid
      for (int a = 0; a < n_att; ++a) {
        const int4 item = tiles[cta[kCtaAtt] + a];  // row, head, split
        acquire_wait(count_qkv + l * H + item.y, (i + 1) * p.tq, err, 4);
        attend<T>(p, l, item.x, item.y, item.z, pos, scratch, p.fused ? xn : nullptr);
        if (p.fused) {
          each_block<T>(ring, blocks, bi, i, C, err, [&](int4 blk, const T* w) {
            float* dst = x_mid + item.x * C + blk.w;
            block_matvec<T, 1>(w, blk.z, D, xn, D, scratch, [&](int r, int, float v) { atomicAdd(dst + r, v); });
          });
        }
      }
      if (n_att > 0 && !p.fused) release_add(count_att + l, n_att);
      // A: proj tiles, once every item of the layer is in: x_mid = x_l + b_o + y W_o^T
      if (n_proj > 0) {
        acquire_wait(count_att + l, (i + 1) * p.n_att, err, 5);
        combine<NB>(p, xn, scratch);
      }
      for (int q = 0; q < n_proj; ++q) {
        const int4 tile = tiles[cta[kCtaProj] + q];  // first row, rows
        each_block<T>(ring, blocks, bi, i, tile.y, err, [&](int4 blk, const T* w) {
          const int r0 = tile.x + blk.w;
          const float* bias_blk = bias + nb + blk.w;
          block_matvec<T, NB>(w, blk.z, C, xn, C, scratch, [&](int r, int b, float v) {
            if (b < B) x_mid[b * C + r0 + r] = xraw[b * C + r0 + r] + bias_blk[r] + v;
          });
        });
        nb += tile.y;
      }
      grid_sync(p.sync, ++k, err, p.prof);  // x_mid is whole
      // M: x_out = x_mid + b_proj2 + sum over the fc tiles of GELU(LN2(x_mid) W_fc^T + b_fc) W_proj2^T
      bias += p.bias_rows;  // M: this CTA's fc rows'
      if (n_fc > 0 || first)
        load_norm<T, NB, 1>(p, x_mid, slot_elems, layer_vec<T>(p.ln2_w, l, C), layer_vec<T>(p.ln2_b, l, C), xraw, xn, stats,
                         scratch, first ? x_out : nullptr, layer_vec<T>(p.b_p2, l, C));
      nb = 0;
      for (int q = 0; q < n_fc; ++q) {
        const int4 tile = tiles[cta[kCtaFc] + q];  // first hidden unit, units
        each_block<T>(ring, blocks, bi, i, tile.y, err, [&](int4 blk, const T* w) {
          const int r0 = blk.w;
          const float* bias_blk = bias + nb + r0;
          block_matvec<T, NB>(w, blk.z, C, xn, C, scratch, [&](int r, int b, float v) {
            v += bias_blk[r];
            u[b * p.rf + r0 + r] = b < B ? 0.5f * v * (1.f + erff(v * 0.70710678118654752f)) : 0.f;
          });
        });
        nb += tile.y;
        float acc[NB][8];
#pragma unroll
        for (int b = 0; b < NB; ++b)
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[b][e] = 0.f;
        each_block<T>(ring, blocks, bi, i, tile.y, err,
                      [&](int4 blk, const T* w) { block_axpy<T, NB>(w, blk.z, C, u, p.rf, blk.w, acc); });
        if (threadIdx.x < (C >> 3)) {
#pragma unroll
          for (int b = 0; b < NB; ++b) {
            if (b >= B) break;
            float4* dst = reinterpret_cast<float4*>(x_out + (blockIdx.x % REPS) * slot_elems + b * C + threadIdx.x * 8);
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
      load_norm<T, NB, REPS>(p, X + 2 * L * slot_stride, slot_elems, static_cast<const T*>(p.lnf_w), static_cast<const T*>(p.lnf_b), xraw,
                       xn, stats, scratch, nullptr, static_cast<const T*>(nullptr));
      for (int q = 0; q < n_head; ++q) {
        const int4 tile = tiles[cta[kCtaHead] + q];  // first vocabulary row, rows
        each_block<T>(ring, blocks, bi, i, tile.y, err, [&](int4 blk, const T* w) {
          const int r0 = tile.x + blk.w;
          block_matvec<T, NB>(w, blk.z, C, xn, C, scratch, [&](int r, int b, float v) {
            if (b < B) p.logits[(static_cast<size_t>(t) * B + b) * p.V + r0 + r] = v;
          });
        });
      }
      consumer_sync();
      if (threadIdx.x == 0) {
        __threadfence();
        const unsigned before = atomicAdd(p.sync + 1, static_cast<unsigned>(n_head));
        __threadfence();
        *flag = before + n_head == static_cast<unsigned>((i + 1) * p.n_head_tiles);
      }
      consumer_sync();
      if (*flag) sample<T>(p, t, pos, scratch, X_next);  // every logit of the step is in
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
