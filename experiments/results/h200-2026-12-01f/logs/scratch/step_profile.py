"""Scratch: where an eager bf16 train step's host time goes, attention=triton against sdpa."""
import cProfile
import io
import pstats
import sys
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir

from kernels import triton_launch
from transformerop.config import register
from transformerop.data import build_data
from transformerop.tasks.bench_cases import make_trainer
from transformerop.measure.timing import host_time, measure

register()
for att in sys.argv[1:]:
    with initialize_config_dir(config_dir=str(Path("conf").resolve()), version_base="1.3"):
        cfg = compose("config", overrides=["data=shakespeare", "model=gpt", "train.dtype=bfloat16", f"attention={att}",
                                           "logger=none", "task=bench", "bench.target=train_step"])
    dev = torch.device("cuda")
    data = build_data(cfg, dev)
    tr = make_trainer(cfg, dev, data, Path("/tmp/stepprof"))
    for i in range(15):
        tr.train_step(i)
    torch.cuda.synchronize()
    st = measure(lambda: tr.train_step(20), dev, 25, 300)
    ht = host_time(lambda: tr.train_step(20), dev, calls=5, repeats=5)
    print(att, "step median ms", round(st["median_ms"], 3), "host", ht, "launch stats", triton_launch.stats, flush=True)
    pr = cProfile.Profile()
    pr.enable()
    for i in range(20):
        tr.train_step(30 + i)
    torch.cuda.synchronize()
    pr.disable()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(22)
    print(s.getvalue()[:5000], flush=True)
