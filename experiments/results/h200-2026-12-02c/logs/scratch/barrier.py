"""Scratch: an empty grid barrier's cost on the full grid (one program per SM), as phase_profile prices it."""
import torch
from kernels import triton_persistent as k

progs = torch.cuda.get_device_properties(0).multi_processor_count
for n_prog in (progs, progs // 2, 32):
    bar = torch.zeros(1, device="cuda", dtype=torch.int32)
    prof = torch.zeros(1000 + n_prog, device="cuda", dtype=torch.int64)  # stamps, then each program's time
    for rep in range(3):
        bar.zero_()
        k._barrier_run_kernel[(n_prog,)](bar, prof, 1000, num_warps=8)
        torch.cuda.synchronize()
    d = torch.diff(prof[:1000].double()) / 1e3
    mean = (prof[999] - prof[0]).item() / 999 / 1e3
    print(f"BARRIER programs={n_prog} mean {mean:.3f} us median {d.median().item():.3f} us p25 {d.quantile(0.25).item():.3f} "
          f"p75 {d.quantile(0.75).item():.3f}", flush=True)
