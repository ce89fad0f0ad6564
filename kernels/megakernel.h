// Host entry points of kernels/megakernel.cu (raw pointers, no torch types): the decode run's
// parameters and the per-CTA schedule record that decode/megakernel_plan.py writes.
#pragma once
#include <cstdint>
#include <cuda_runtime.h>

namespace mk {

// One CTA's record in Params::cta (kCtaRecord ints): its first block in Params::blocks, its weight
// stream (packets, where it starts in Params::packed in 16-byte units, the last packet's bytes),
// then (first, count) into Params::tiles for each kind of work, then its block count and its
// ring: resident or streamed, the slot size and count.
enum CtaField : int {
  kCtaBlocks = 0,
  kCtaPackets = 1,
  kCtaSource = 2,
  kCtaLastBytes = 3,
  kCtaQkv = 4,   // tiles: {head, first row within the head's q|k|v rows, rows, 0}
  kCtaAtt = 6,   // items: {batch row, head, split, 0}
  kCtaProj = 8,  // tiles: {first row of W_o, rows, 0, 0}
  kCtaFc = 10,   // tiles: {first hidden unit, units, 0, 0}
  kCtaHead = 12,  // tiles: {first vocabulary row, rows, 0, 0}
  kCtaNumBlocks = 14,
  kCtaResident = 15,  // its whole stream stays in the ring, loaded once a launch
  kCtaStage = 16,     // bytes of a ring slot (resident: the whole stream)
  kCtaSlots = 17,
  kCtaRecord = 20,
};
// Params::sync: the grid barrier, the head tiles' count, the error code, then a count per
// (layer, head) of its qkv tiles done, then a count per layer of its attention items done.
constexpr int kSyncCounters = 3;
constexpr int kMaxSlots = 16;  // mbarrier pairs after the ring

struct Params {
  const int* cta;
  const int4* blocks;  // {packet, byte offset in the packet, rows, first row within its tile}
  const int4* tiles;
  const uint8_t* packed;
  // the model, in its dtype (a null pointer: the model has no such vector)
  const void *wte, *wpe, *ln1_w, *ln1_b, *ln2_w, *ln2_b, *lnf_w, *lnf_b, *b_qkv, *b_o, *b_fc, *b_p2;
  void *kc, *vc;  // (L, B, H, W, D) caches
  // scratch: fp32
  float* qkv;     // (B, 3C), head-major
  float* part;    // (B, H, splits, D + 4): o, m, l, then two floats of padding
  float* x;       // (2, 2L + 1, reps, B, C): the residual stream's slots, a set per step parity, each
                  // in `reps` copies that the MLP's CTAs add into by turns (CTA % reps)
  float* logits;  // (total, B, V)
  const float* noise;  // (total, B, V) Gumbel noise, or null (greedy)
  int64_t* out;        // (B, total)
  int64_t *t_ptr, *pos_ptr;
  unsigned* sync;
  long long* prof;  // globaltimer stamps at every grid barrier, or null
  int n_steps, B, C, H, L, V, W, total;
  int splits, split_len, tq, n_att, n_head_tiles, rf, scratch, bias_rows, fused, reps;
  int ring_bytes;  // the ring's share of shared memory; its mbarriers follow
  float eps, scale, temperature;
  int top_k, greedy;
};

cudaError_t launch(const Params& p, bool bf16, int nb, int grid, size_t smem, cudaStream_t stream);
cudaError_t launch_barriers(unsigned* sync, long long* prof, int n, int grid, cudaStream_t stream);
int max_shared_memory(int device);

}  // namespace mk
