"""The decode run's CUDA kernel (kernels/megakernel.cu) as a torch extension built by load_inline
(kernels/cuda_build.py: lazy, cached on disk by a hash of the sources), and its launch from
tensors. decode/megakernel.py owns the schedule and the buffers; this module only binds them."""
import re
from pathlib import Path

import torch

from . import cuda_build

KERNEL_DIR = Path(__file__).resolve().parent
SOURCE = KERNEL_DIR / "megakernel.cu"
HEADER = KERNEL_DIR / "megakernel.h"

BINDING = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>

namespace {
const void* opt(const torch::Tensor& t) { return t.numel() ? t.data_ptr() : nullptr; }
}

// tensors: cta, blocks, tiles, packed, wte, wpe, ln1_w, ln1_b, ln2_w, ln2_b, lnf_w, lnf_b, b_qkv,
// b_o, b_fc, b_p2, kc, vc, qkv, part, x, logits, noise, out, t, pos, sync, prof (an empty tensor:
// none); ints: n_steps, B, C, H, L, V, W, total, splits, split_len, tq, n_att, n_head_tiles, rf,
// scratch, ring_bytes, top_k, greedy, nb, grid, smem, bias_rows, fused, reps; floats: eps, scale,
// temperature
void run(std::vector<torch::Tensor> t, std::vector<int64_t> i, std::vector<double> f) {
  TORCH_CHECK(t.size() == 28 && i.size() == 24 && f.size() == 3, "megakernel.run: wrong argument counts");
  TORCH_CHECK(i[23] == (i[18] >= 8 ? 1 : 8 / i[18]), "megakernel.run: slot copies off the kernel's rule");
  for (auto& x : t) TORCH_CHECK(!x.numel() || (x.is_cuda() && x.is_contiguous()), "megakernel.run: CUDA tensors only");
  const bool bf16 = t[4].scalar_type() == torch::kBFloat16;
  mk::Params p{};
  p.cta = t[0].data_ptr<int>();
  p.blocks = reinterpret_cast<const int4*>(t[1].data_ptr<int>());
  p.tiles = reinterpret_cast<const int4*>(t[2].data_ptr<int>());
  p.packed = t[3].data_ptr<uint8_t>();
  p.wte = opt(t[4]), p.wpe = opt(t[5]), p.ln1_w = opt(t[6]), p.ln1_b = opt(t[7]), p.ln2_w = opt(t[8]);
  p.ln2_b = opt(t[9]), p.lnf_w = opt(t[10]), p.lnf_b = opt(t[11]), p.b_qkv = opt(t[12]), p.b_o = opt(t[13]);
  p.b_fc = opt(t[14]), p.b_p2 = opt(t[15]);
  p.kc = t[16].data_ptr(), p.vc = t[17].data_ptr();
  p.qkv = t[18].data_ptr<float>(), p.part = t[19].data_ptr<float>(), p.x = t[20].data_ptr<float>();
  p.logits = t[21].data_ptr<float>();
  p.noise = t[22].numel() ? t[22].data_ptr<float>() : nullptr;
  p.out = t[23].data_ptr<int64_t>(), p.t_ptr = t[24].data_ptr<int64_t>(), p.pos_ptr = t[25].data_ptr<int64_t>();
  p.sync = reinterpret_cast<unsigned*>(t[26].data_ptr<int>());
  p.prof = t[27].numel() ? reinterpret_cast<long long*>(t[27].data_ptr<int64_t>()) : nullptr;
  p.n_steps = i[0], p.B = i[1], p.C = i[2], p.H = i[3], p.L = i[4], p.V = i[5], p.W = i[6], p.total = i[7];
  p.splits = i[8], p.split_len = i[9], p.tq = i[10], p.n_att = i[11], p.n_head_tiles = i[12], p.rf = i[13];
  p.scratch = i[14], p.ring_bytes = i[15], p.top_k = i[16], p.greedy = i[17];
  p.bias_rows = i[21], p.fused = i[22], p.reps = i[23];
  p.eps = f[0], p.scale = f[1], p.temperature = f[2];
  const c10::cuda::CUDAGuard guard(t[4].device());
  const cudaError_t e = mk::launch(p, bf16, int(i[18]), int(i[19]), size_t(i[20]), c10::cuda::getCurrentCUDAStream());
  TORCH_CHECK(e == cudaSuccess, "megakernel launch failed: ", cudaGetErrorString(e));
}

void barriers(torch::Tensor sync, torch::Tensor prof, int64_t n, int64_t grid) {
  const c10::cuda::CUDAGuard guard(sync.device());
  const cudaError_t e = mk::launch_barriers(reinterpret_cast<unsigned*>(sync.data_ptr<int>()),
                                            reinterpret_cast<long long*>(prof.data_ptr<int64_t>()), int(n), int(grid),
                                            c10::cuda::getCurrentCUDAStream());
  TORCH_CHECK(e == cudaSuccess, "megakernel barrier launch failed: ", cudaGetErrorString(e));
}

int64_t max_shared_memory(int64_t device) { return mk::max_shared_memory(int(device)); }
"""


LOCAL_INCLUDE = re.compile(r'^#include "([^"]+)"$', re.MULTILINE)


def inline(path: Path, seen: set) -> str:
    """The file with our own headers' text in place of their includes, each header once: one
    self-contained translation unit for load_inline."""
    def header(m):
        name = m.group(1)
        if name in seen:
            return ""
        seen.add(name)
        return inline(KERNEL_DIR / name, seen).replace("#pragma once", "")
    return LOCAL_INCLUDE.sub(header, path.read_text())


def sources() -> tuple[list[str], list[str]]:
    return [inline(HEADER, set()) + BINDING], [inline(SOURCE, set())]


EXTENSION = cuda_build.Extension("tfo_megakernel", "the decode megakernel", sources,
                                 ("run", "barriers", "max_shared_memory"))


def require(what: str, device=None) -> None:
    """BackendUnavailable, one line naming what is missing for `what`, unless the kernel can build and run."""
    cuda_build.require_cuda(what, device, EXTENSION)


def load():
    return cuda_build.load(ext=EXTENSION)


def shared_memory_limit(device) -> int:
    """Bytes of shared memory one CTA may take on this device (the opt-in limit)."""
    return int(load().max_shared_memory(torch.device(device).index or 0))
