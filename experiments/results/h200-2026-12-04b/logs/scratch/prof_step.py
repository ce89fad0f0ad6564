"""Run run.py with the profiler's kernel table kept whole: every kernel, written to $OUT/<tag>.json."""
import json, os, runpy, sys
import torch
from torch.profiler import ProfilerActivity, profile
import transformerop.measure.profiler as P
from transformerop.measure import timing

tag = sys.argv[1]
out = os.path.join(os.environ.get("OUT", "/tmp"), f"{tag}.json")
def full(fn, per):
    timing.profiling_gpu()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn(); torch.cuda.synchronize()
    by = {}
    for e in prof.events():
        if P.on_device(e):
            by.setdefault(e.name, []).append(e.time_range.elapsed_us())
    total = sum(map(sum, by.values()))
    rows = sorted(([n, sum(d) / per, len(d) / per, sorted(d)[len(d) // 2]] for n, d in by.items()), key=lambda r: -r[1])
    with open(out, "a") as f:
        f.write(json.dumps({"per": per, "kernel_us": total / per, "rows": rows}) + "\n")
    return {"kernel_us": total / per, "kernels": sum(map(len, by.values())) / per, "top": [[r[0][:70]] + r[1:] for r in rows[:10]]}
P.kernel_profile = full
sys.argv = ["run.py"] + sys.argv[2:]
runpy.run_path("run.py", run_name="__main__")
