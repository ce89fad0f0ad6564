"""What the sync a one-launch decode is built of costs on this GPU: one CTA per SM, cooperative
launch, ns per iteration of each pattern (CTA 0's globaltimer over ITERS iterations)."""
import json, os, sys
import torch
from torch.utils.cpp_extension import load_inline

CUDA = r"""
#include <cstdint>
#include <cuda_runtime.h>
__device__ __forceinline__ long long gt() { long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t; }
__device__ __forceinline__ unsigned ld_acq(const unsigned* p) { unsigned v; asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory"); return v; }
__device__ __forceinline__ void red_rel(unsigned* p, unsigned v) { asm volatile("red.release.gpu.global.add.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory"); }
__device__ __forceinline__ void spin(const unsigned* p, unsigned target) { while (ld_acq(p) < target) {} }
// the grid barrier: fence + relaxed add (kind 0) or one release add (kind 1)
__device__ __forceinline__ void gsync(unsigned* bar, unsigned k, int kind) {
  __syncthreads();
  if (threadIdx.x == 0) {
    if (kind == 0) { __threadfence(); atomicAdd(bar, 1u); } else red_rel(bar, 1u);
    spin(bar, k * gridDim.x);
  }
  __syncthreads();
}
__global__ void bench(int mode, int iters, unsigned* sync, float* buf, long long* out, int R) {
  unsigned* bar = sync; unsigned* flags = sync + 64;
  const int C = 384;
  unsigned k = 0;
  gsync(bar, ++k, 0);
  long long t0 = gt();
  __shared__ float red[9];
  for (int it = 0; it < iters; ++it) {
    if (mode == 2 || mode == 8) {  // 96 float4 atomics a CTA into the same C floats
      if (threadIdx.x < C / 4) atomicAdd(reinterpret_cast<float4*>(buf) + threadIdx.x, make_float4(1.f, 1.f, 1.f, 1.f));
    } else if (mode == 3) {  // C scalar atomics a CTA into the same C floats
      for (int c = threadIdx.x; c < C; c += blockDim.x) atomicAdd(buf + c, 1.f);
    } else if (mode == 4) {  // 96 float4 atomics a CTA into its own C floats
      if (threadIdx.x < C / 4) atomicAdd(reinterpret_cast<float4*>(buf + 4096 + blockIdx.x * C) + threadIdx.x, make_float4(1.f, 1.f, 1.f, 1.f));
    } else if (mode == 5) {  // read a C-float slot through L2 and reduce it over the CTA
      float v = 0.f;
      for (int c = threadIdx.x; c < C; c += blockDim.x) v += __ldcg(buf + c);
      for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
      if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
      __syncthreads();
      if (threadIdx.x == 0) { float s = 0.f; for (int w = 0; w < 8; ++w) s += red[w]; red[8] = s; }
      __syncthreads();
      if (red[8] == -1.f) buf[0] = 0.f;  // keep it
    } else if (mode == 10) {  // C scalar atomics a CTA into replica (CTA % R) of C floats
      float* dst = buf + 8192 + (blockIdx.x % R) * C;
      for (int c = threadIdx.x; c < C; c += blockDim.x) atomicAdd(dst + c, 1.f);
    } else if (mode == 11) {  // 96 float4 atomics a CTA into replica (CTA % R)
      if (threadIdx.x < C / 4) atomicAdd(reinterpret_cast<float4*>(buf + 8192 + (blockIdx.x % R) * C) + threadIdx.x, make_float4(1.f, 1.f, 1.f, 1.f));
    } else if (mode == 12) {  // read R replicas of a C-float slot through L2 (one round), sum, CTA reduce
      float v = 0.f;
      for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float a[16];
#pragma unroll
        for (int r = 0; r < 16; ++r) a[r] = r < R ? __ldcg(buf + 8192 + r * C + c) : 0.f;
#pragma unroll
        for (int r = 0; r < 16; ++r) v += a[r];
      }
      for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
      if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
      __syncthreads();
      if (threadIdx.x == 0) { float s = 0.f; for (int w = 0; w < 8; ++w) s += red[w]; red[8] = s; }
      __syncthreads();
      if (red[8] == -1.f) buf[0] = 0.f;
    } else if (mode == 6 || mode == 7) {  // a hand-off chain: CTA c waits on c-1, then signals c
      if (threadIdx.x == 0) {
        const unsigned target = it + 1;
        if (blockIdx.x > 0) spin(flags + (blockIdx.x - 1) * 32, target);
        else if (it > 0) spin(flags + (gridDim.x - 1) * 32, it);
        if (mode == 6) { __threadfence(); atomicAdd(flags + blockIdx.x * 32, 1u); } else red_rel(flags + blockIdx.x * 32, 1u);
      }
      __syncthreads();
      continue;  // no barrier: the chain is the sync
    }
    if (mode != 9) gsync(bar, ++k, mode == 1 || mode == 8 ? 1 : 0);
  }
  if (mode == 6 || mode == 7) gsync(bar, ++k, 0);
  if (blockIdx.x == 0 && threadIdx.x == 0) out[mode] = (gt() - t0) / iters;
}
void run(int mode, int iters, torch::Tensor sync, torch::Tensor buf, torch::Tensor out, int grid, int R) {
  int m = mode, n = iters, r = R;
  unsigned* s = reinterpret_cast<unsigned*>(sync.data_ptr<int>());
  float* b = buf.data_ptr<float>(); long long* o = reinterpret_cast<long long*>(out.data_ptr<int64_t>());
  void* args[] = {&m, &n, &s, &b, &o, &r};
  cudaLaunchCooperativeKernel(reinterpret_cast<void*>(bench), dim3(grid), dim3(256), args, 0, 0);
}
"""
ext = load_inline("sync_bench_y", cpp_sources="void run(int mode, int iters, torch::Tensor sync, torch::Tensor buf, torch::Tensor out, int grid, int R);",
                  cuda_sources=CUDA, functions=["run"], extra_cuda_cflags=["-O3", "-arch=sm_90"], verbose=False)
grid = torch.cuda.get_device_properties(0).multi_processor_count
names = {0: "barrier (threadfence + atomicAdd)", 1: "barrier (red.release)", 2: "96 float4 atomics, same C floats, + barrier",
         3: "384 scalar atomics, same C floats, + barrier", 4: "96 float4 atomics, own floats, + barrier",
         5: "L2 read of a C-float slot + CTA reduce + barrier", 6: "hand-off hop (threadfence + atomicAdd) [per hop]",
         7: "hand-off hop (red.release) [per hop]", 8: "96 float4 atomics, same C floats, + barrier (red.release)"}
cases = [(m, 1) for m in names] + [(m, r) for m in (10, 11, 12) for r in (1, 2, 4, 8, 16)]
names.update({10: "384 scalar atomics into replica CTA%R + barrier", 11: "96 float4 atomics into replica CTA%R + barrier",
              12: "L2 read of R replicas (one round) + CTA reduce + barrier"})
res = {}
for rep in range(3):
    for mode, R in cases:
        sync = torch.zeros(64 + 32 * grid, dtype=torch.int32, device="cuda")
        buf = torch.zeros(8192 + 64 * 384 + grid * 384, device="cuda")
        out = torch.zeros(16, dtype=torch.int64, device="cuda")
        iters = 200 if mode in (6, 7) else 2000
        ext.run(mode, iters, sync, buf, out, grid, R)
        torch.cuda.synchronize()
        ns = out[mode].item() / (grid if mode in (6, 7) else 1)
        res.setdefault(names[mode] + (f' R={R}' if mode >= 10 else ''), []).append(ns)
for k, v in res.items():
    print(f"{sorted(v)[1]:8.1f} ns  (runs {', '.join(f'{x:.0f}' for x in v)})  {k}")
json.dump(res, open(os.path.join(os.environ.get("OUT", "/tmp"), "sync_bench.json"), "w"), indent=1)
