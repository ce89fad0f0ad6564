"""decode=megakernel with thread 0 of every CTA stamping the globaltimer at 13 points of one layer
of one decode step (a scratch build: the committed kernel is patched here, not in the tree).
Prints, per point, the median and max over the CTAs that pass it, in us after the layer's start."""
import json, os, sys
import torch
from omegaconf import OmegaConf
import kernels.megakernel as km
from kernels import cuda_build

STEP, LAYER = int(os.environ.get("TRACE_STEP", 200)), int(os.environ.get("TRACE_LAYER", 2))
ANCHORS = [  # (text in decode_run, stamp before (0) or after (1) it, slot)
    ("const T* b_o = layer_vec<T>(p.b_o, l, C);", 1, 0),
    ("scratch, p.fused && first ? x_mid : nullptr, b_o);", 1, 1),
    ("      // A: attention items, each once", 0, 2),
    ("acquire_wait(count_qkv + l * H + item.y, (i + 1) * p.tq, err, 4);", 1, 3),
    ("attend<T>(p, l, item.x, item.y, item.z, pos, scratch, p.fused ? xn : nullptr);", 1, 4),
    ("      if (n_att > 0 && !p.fused) release_add", 0, 5),
    ("      grid_sync(p.sync, ++k, err, p.prof);  // x_mid is whole", 0, 6),
    ("grid_sync(p.sync, ++k, err, p.prof);  // x_mid is whole", 1, 7),
    ("scratch, first ? x_out : nullptr, layer_vec<T>(p.b_p2, l, C));", 1, 8),
    ("        nb += tile.y;\n        float acc[NB][8];", 0, 9),
    ("consumer_sync();  // u is rewritten by the next tile", 1, 10),
    ("      grid_sync(p.sync, ++k, err, p.prof);  // x_out is whole", 0, 11),
    ("grid_sync(p.sync, ++k, err, p.prof);  // x_out is whole", 1, 12),
]
NAMES = ["layer start", "LN1 slot read", "qkv tiles done", "acquired head", "attend done", "proj added",
         "arrive barrier A", "leave barrier A", "LN2 slot read", "fc done (1st tile)", "fc2 atomics done",
         "arrive barrier M", "leave barrier M"]
orig_sources = km.sources

def sources():
    cpp, cu = orig_sources()
    src = cu[0]
    def stamp(s):
        clk = f" mk_trace[blockIdx.x * 16 + {14 if s == 0 else 15}] = clock64();" if s in (0, 12) else ""
        return f" if (i == {STEP} && l == {LAYER} && threadIdx.x == 0) {{ mk_trace[blockIdx.x * 16 + {s}] = globaltimer();{clk} }} "
    for text, after, s in ANCHORS:
        assert src.count(text) == 1, text
        src = src.replace(text, text + stamp(s) if after else stamp(s) + text)
    src = src.replace("namespace mk {\n\ntemplate <typename T> __device__ __forceinline__ const T* layer_vec",
                      "namespace mk {\n__device__ long long mk_trace[16 * 1024];\ntemplate <typename T> __device__ __forceinline__ const T* layer_vec")
    assert "mk_trace[16" in src
    src += "\nvoid mk_read_trace(long long* dst) { cudaMemcpyFromSymbol(dst, mk::mk_trace, sizeof(mk::mk_trace)); }\n"
    cpp = [cpp[0] + "\nvoid mk_read_trace(long long* dst);\ntorch::Tensor trace() { auto t = torch::zeros({16 * 1024}, torch::kInt64); mk_read_trace(reinterpret_cast<long long*>(t.data_ptr<int64_t>())); return t; }\n"]
    return cpp, [src]

km.sources = sources
km.EXTENSION = cuda_build.Extension("tfo_megakernel_trace", "the traced decode megakernel", sources,
                                    ("run", "barriers", "max_shared_memory", "trace"))
from transformerop.decode import Decoder, timed_generation
from transformerop.model import build_model

out = {}
for name, C, L, H, B in [("gpt", 384, 6, 6, 1)]:
    torch.manual_seed(0)
    cfg = OmegaConf.create({"model": {"name": "gpt", "n_layer": L, "n_head": H, "n_embd": C, "block_size": 256,
                                      "dropout": 0.0, "bias": True}, "attention": {"name": "sdpa"}})
    m = build_model(cfg, 65).cuda().to(torch.bfloat16).eval()
    prompt = torch.zeros(B, 1, dtype=torch.long, device="cuda")
    dec = Decoder(m, "megakernel", B, 501, temperature=1.0)
    stats, _ = timed_generation(dec, prompt, lambda: torch.Generator(device="cuda").manual_seed(1), torch.device("cuda"))
    dec(prompt)  # one more run; the trace holds the last run's stamps
    torch.cuda.synchronize()
    tr = km.load().trace().view(1024, 16)[: dec.runner.grid].double()
    t0 = tr[:, 0][tr[:, 0] > 0].min()
    rows = {}
    for s, nm in enumerate(NAMES):
        v = tr[:, s][tr[:, s] > 0]
        if len(v):
            v = (v - t0) / 1e3
            rows[nm] = [len(v), round(v.median().item(), 2), round(v.max().item(), 2)]
    mhz = ((tr[:, 15] - tr[:, 14]) / (tr[:, 12] - tr[:, 0]) * 1e3)[tr[:, 12] > 0]
    rows["SM clock MHz (layer)"] = [len(mhz), round(mhz.median().item(), 1), round(mhz.max().item(), 1)]
    key = f"{name} b{B}"
    out[key] = {"tok_s": round(500 / stats["median_ms"] * 1e3), "points": rows}
    print(f"== {key}: {out[key]['tok_s']} tok/s; point: CTAs, median us, max us after the layer's first start")
    for nm, r in rows.items():
        print(f"  {nm:22s} {r[0]:4d} {r[1]:8.2f} {r[2]:8.2f}")
json.dump(out, open(os.path.join(os.environ.get("OUT", "/tmp"), "mk_trace.json"), "w"), indent=1)
