"""The train step's kernels from a job's results.json (train.profile): the rows whose names match."""
import json
import sys

r = json.load(open(sys.argv[1]))
rows = r["tables"]["train_step_kernels"]["rows"]
m = r.get("metrics", {})
print(sys.argv[1], "| kernel us", round(r["timings"]["train_step"]["kernel_us"], 1), "| kernels", r["timings"]["train_step"]["kernels"],
      "| step ms", m.get("step_ms"), "| time_to_target_s", m.get("time_to_target_s"), "| startup_s", m.get("startup_s"))
for k in rows:
    if any(s in k[0] for s in sys.argv[2:]) or not sys.argv[2:]:
        print(f"  {k[1]:8.1f} us {k[2]:4.0f}x {k[3]:7.2f}  {k[0][:110]}")
