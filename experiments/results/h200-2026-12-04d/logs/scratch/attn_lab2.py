"""attention=sdpa vs triton (forward=tl) vs triton (forward=gluon) through the backends' attend(),
bf16, causal, B 64, H 6: forward and forward+backward, eager (do_bench) and graphed
(do_bench_cudagraph), after a parity gate of gluon against tl (outputs and gradients)."""
import json, os
import torch
from omegaconf import OmegaConf
from triton.testing import do_bench, do_bench_cudagraph
from transformerop.model import get_backend

torch.manual_seed(0)
rows = []
for D in (64, 128):
    for T in (256, 512, 1024, 2048):
        m = OmegaConf.create({"n_embd": 6 * D, "n_head": 6, "block_size": T, "bias": False, "dropout": 0.0})
        mods = {}
        for label, acfg in (("sdpa", {"name": "sdpa"}), ("tl", {"name": "triton"}), ("gluon", {"name": "triton", "forward": "gluon"})):
            a = OmegaConf.merge(OmegaConf.create({"allow_tf32": True, "cpp_launch": True, "forward": "tl", "version": 5, "softmax": "torch", "softmax_threshold": 1024}), acfg)
            mods[label] = get_backend(acfg["name"])(m, a).cuda().eval()
        q, k, v = (torch.randn(64, 6, T, D, device="cuda").to(torch.bfloat16).requires_grad_() for _ in range(3))
        dout = torch.randn(64, 6, T, D, device="cuda").to(torch.bfloat16)
        outs = {}
        for label, mod in mods.items():
            o = mod.attend(q, k, v, None)
            outs[label] = (o.detach(), *torch.autograd.grad(o, (q, k, v), dout))
        err = max(((a.float() - b.float()).abs().max() / b.float().abs().max()).item() for a, b in zip(outs["gluon"], outs["tl"]))
        row = {"D": D, "T": T, "gluon_vs_tl_err": err}
        assert err < 2e-2, row
        for label, mod in mods.items():
            def fwd(mod=mod):
                with torch.no_grad():
                    return mod.attend(q, k, v, None)
            def fwd_bwd(mod=mod):
                return torch.autograd.grad(mod.attend(q, k, v, None), (q, k, v), dout)
            for name, fn in (("fwd", fwd), ("fwd_bwd", fwd_bwd)):
                fn()
                e = do_bench(fn, warmup=25, rep=200, quantiles=[0.5, 0.2, 0.8])
                g = do_bench_cudagraph(fn, rep=200, quantiles=[0.5, 0.2, 0.8])
                row[f"{label}_{name}_eager_us"] = [round(x * 1e3, 2) for x in e]
                row[f"{label}_{name}_graph_us"] = [round(x * 1e3, 2) for x in g]
        print("row", json.dumps(row), flush=True)
        rows.append(row)
json.dump(rows, open(os.environ.get("OUT", "/tmp") + "/attn_lab2.json", "w"), indent=1)
