// decode=megakernel's synchronisation: the PTX it needs (mbarriers, bulk copies, acquire loads),
// the waits on counters and the grid barrier between the CTAs, and the weight ring: slots of
// shared memory that bulk copies fill while the threads work on the slots before them.
#pragma once
#include <cstdint>
#include <cstdio>
#include <cuda_runtime.h>

#include "megakernel.h"

namespace mk {

// Eight warps, every one working on the math: a ninth warp (a producer streaming the weights)
// put three warps on one of the SM's four register-file partitions, which capped a thread at 168
// registers and spilled the products' registers to local memory -- out of an L1 that shared
// memory leaves small, so to L2. Bulk copies need no warp of their own: the thread that frees a
// slot issues the copy that refills it.
constexpr int kConsumerWarps = 8;
constexpr int kConsumers = 32 * kConsumerWarps;
constexpr int kThreads = kConsumers;
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
__device__ __forceinline__ void consumer_sync() {
  asm volatile("bar.sync 1, %0;" ::"n"(kConsumers) : "memory");
}
__device__ __forceinline__ void fence_proxy_async() {  // the threads' reads of a slot before a bulk copy rewrites it
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
__device__ __forceinline__ void mbar_init(uint64_t* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
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

// ---- the weight ring --------------------------------------------------------------------------

struct Ring {
  uint8_t* base;
  uint64_t* full;  // a slot's copy has landed (one mbarrier a slot; its phase flips with each fill)
  const uint8_t* src;  // the CTA's stream in global memory
  int stage, slots, resident, n_packets, last_bytes;
  long long total;  // packets over the run (resident: the one)
  long long cur;  // the packet (sequence number over the run) the threads hold, -1 before the first
};

// Thread 0: packet seq of the run (the stream repeats every step) into its slot.
__device__ void fill(Ring& ring, long long seq) {
  const int slot = static_cast<int>(seq % ring.slots), q = static_cast<int>(seq % ring.n_packets);
  const int bytes = q == ring.n_packets - 1 ? ring.last_bytes : ring.stage;
  mbar_expect_tx(&ring.full[slot], bytes);
  for (int off = 0; off < bytes; off += kPiece)
    bulk_copy(ring.base + static_cast<size_t>(slot) * ring.stage + off, ring.src + static_cast<size_t>(q) * ring.stage + off,
              min(kPiece, bytes - off), &ring.full[slot]);
}

// Thread 0, at the start: the first `slots` packets on their way.
__device__ void fill_first(Ring& ring) {
  for (long long seq = 0; seq < min(static_cast<long long>(ring.slots), ring.total); ++seq) fill(ring, seq);
}

// The shared-memory address of a block at `offset` in packet `packet` of step `step`: moving to a
// new packet frees the one held -- thread 0 refills its slot with the packet `slots` ahead -- and
// waits for the new one to land.
__device__ const uint8_t* ring_block(Ring& ring, int step, int packet, int offset, unsigned* err) {
  const long long seq = ring.resident ? 0 : static_cast<long long>(step) * ring.n_packets + packet;
  if (seq != ring.cur) {
    if (!ring.resident && ring.cur >= 0) {
      consumer_sync();  // every thread is done with the held packet
      if (threadIdx.x == 0 && ring.cur + ring.slots < ring.total) {
        fence_proxy_async();
        fill(ring, ring.cur + ring.slots);
      }
    }
    mbar_wait(&ring.full[seq % ring.slots], ring.resident ? 0u : static_cast<unsigned>((seq / ring.slots) & 1), err,
              2);
    ring.cur = seq;
  }
  return ring.base + (seq % ring.slots) * ring.stage + offset;
}

}  // namespace mk
