"""Typed config schema. Each dataclass mirrors one config group under conf/ and is stored in
Hydra's ConfigStore, so a wrong type (`model.n_layer=abc`) or an unknown key fails at compose
time with Hydra's own message naming the field."""
from dataclasses import dataclass, field
from typing import Any, List, Optional

import os
import time

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf


@dataclass
class TaskConfig:
    name: str = "train"  # train | generate | bench | profile | validate | calibrate | predict | report


@dataclass
class ModelConfig:
    name: str = "gpt"  # gpt | bigram
    n_layer: int = 6
    n_head: int = 6
    n_embd: int = 384
    block_size: int = 256
    dropout: float = 0.2
    bias: bool = True


@dataclass
class DataConfig:
    name: str = "addition"  # addition | shakespeare
    cache_dir: Optional[str] = None  # None: <repo>/data (or $TRANSFORMEROP_DATA)
    url: str = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
    sha256: str = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
    train_frac: float = 0.9
    n_digits: int = 2  # addition: operands have this many digits
    n_test: int = 1000  # addition: held-out sums never seen in training
    split_seed: int = 2  # addition: the train/test split depends only on this


@dataclass
class AttentionConfig:
    name: str = "sdpa"  # naive_loop | naive | sdpa | cuda | triton
    version: int = 5  # cuda: kernel ladder v1..v5
    softmax: str = "torch"  # naive: torch | cuda_block | cuda_warp | cuda_adaptive
    softmax_threshold: int = 1024  # cuda_adaptive: rows at least this long use the block kernel
    allow_tf32: bool = True  # triton, fp32: TF32 tensor cores in tl.dot (false: IEEE fp32)


@dataclass
class DecodeConfig:
    name: str = "kv_cache"  # recompute | kv_cache | static | static_graph | compiled | fused
    keep: Optional[int] = None  # past block_size: re-prefill the last `keep` tokens (None: block_size // 2)
    # decode=fused: outputs per program and reduction chunk of its matvecs (powers of two). Fewer
    # outputs per program = more programs on the SMs; a sweep over them decides, not a guess.
    block_n: int = 4  # H200 sweep, bf16: 4 -> 5,956 tok/s, 8 -> 5,915, 16 -> 5,689, 32 -> 5,315, 64 -> 3,541
    block_k: int = 128


@dataclass
class TrainConfig:
    max_iters: int = 5000
    batch_size: int = 64
    lr: float = 1e-3
    min_lr: float = 1e-4
    warmup_iters: int = 100
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.99
    grad_clip: float = 1.0
    grad_accum: int = 1
    eval_interval: int = 500
    eval_iters: int = 200
    eval_full: bool = False  # in-loop evals: every window of each split once instead of eval_iters batches
    eval_train: bool = True  # in-loop evals estimate the train split too (false: val only; train loss from the steps)
    dtype: str = "float32"  # float32 | bfloat16 (autocast on CUDA)
    compile: bool = False
    cuda_graph: bool = False  # capture the whole train step in one CUDA graph (CUDA, grad_accum 1, 1 rank)
    resume: Any = True  # true: latest checkpoint in the run dir; false; or a checkpoint path
    checkpoint: bool = True
    sample_tokens: int = 200  # text: characters sampled at the end
    target_loss: Optional[float] = None  # stop early once val loss <= this (time-to-target)
    slow_path: str = "none"  # planted slowdown for the measurement tests: none | host_sync | h2d_copy
    progress: bool = True
    profile: bool = False  # CUDA, task=train: after the run, kernel time over 10 more steps (not saved)


@dataclass
class GenerateConfig:
    tokens: int = 500
    batch_size: int = 1
    prompt: str = "\n"
    temperature: float = 1.0  # 0 = greedy
    top_k: Optional[int] = None
    checkpoint: Optional[str] = None  # None: train in this job first
    repeats: int = 5
    profile: bool = False  # CUDA: after timing, GPU kernel time per token (what bounds decode)


@dataclass
class BenchConfig:
    target: str = "train_step"  # matmul | softmax | attention | forward | train_step | generate
    batch_size: Optional[int] = None  # None: train.batch_size
    seq_len: Optional[int] = None  # None: model.block_size
    rows: Optional[int] = None  # softmax: row count (None: B*heads*T)
    cols: Optional[int] = None  # softmax: row length (None: T)
    backward: bool = True  # attention: also time forward+backward
    graph: bool = False  # forward: replay one CUDA graph instead of eager launches
    profile: bool = False  # CUDA: after timing, GPU kernel time per call (host-bound or kernel-bound?)
    warmup_ms: float = 25.0
    rep_ms: float = 100.0
    flag_ratio: float = 3.0  # measured/predicted beyond this (or below 1/this) is flagged


@dataclass
class LoggerConfig:
    name: str = "wandb"  # wandb | none
    mode: str = "offline"  # offline | online | disabled
    project: str = "transformerop"
    entity: Optional[str] = None


@dataclass
class ReportConfig:
    path: Optional[str] = None  # task=report: sweep dir(s), os.pathsep-separated; None = newest sweep


@dataclass
class StudyConfig:
    name: str = ""  # the experiment this job belongs to
    baseline: str = ""  # override string of the row the report divides by, e.g. "decode=recompute"
    smoke: bool = False  # shrink to CPU size
    # Outside numbers to beat, rendered by the report beside ours (transformerop/goals.py):
    # [{what, metric, where, reference, goal | goal_x_baseline, direction, note}]
    goals: List[Any] = field(default_factory=list)


@dataclass
class Config:
    task: TaskConfig = field(default_factory=TaskConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    attention: AttentionConfig = field(default_factory=AttentionConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    generate: GenerateConfig = field(default_factory=GenerateConfig)
    bench: BenchConfig = field(default_factory=BenchConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    study: StudyConfig = field(default_factory=StudyConfig)
    report: ReportConfig = field(default_factory=ReportConfig)
    device: str = "auto"  # auto: cuda, else mps, else cpu
    seed: int = 1337
    rerun: bool = False  # a relaunched sweep skips jobs whose results.json says ok unless true
    tags: List[str] = field(default_factory=list)


def _start_time(pid) -> float | None:
    """When process `pid` started (Linux /proc), in seconds since the epoch."""
    try:
        ticks = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[19])
        boot = next(int(line.split()[1]) for line in open("/proc/stat") if line.startswith("btime"))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


_first_job_start = None  # when this process's first job started (None: no job yet)
_job_launch = None


def mark_job_start() -> None:
    """Called as each job starts. The first job's clock starts at process launch (imports, Hydra);
    a later job of the same multirun process starts its own clock, set back by that same start-up
    cost, so every job pays it once, as if it had been launched alone."""
    global _first_job_start, _job_launch
    now = time.time()
    proc = _start_time("self") or now
    if _first_job_start is None:
        _first_job_start, _job_launch = now, proc
    else:
        _job_launch = now - (_first_job_start - proc)


def launch_time() -> float:
    """When this job was launched: time-to-target clocks count from here, imports included."""
    return _job_launch or _start_time("self") or time.time()


def run_stamp() -> str:
    """The run dir's time stamp. Under torchrun every rank must name the same dir, so ranks use
    the start time of their common parent (the torchrun agent) instead of their own clock."""
    when = (_start_time(os.getppid()) if "LOCAL_RANK" in os.environ else None) or time.time()
    return time.strftime("%Y-%m-%d_%H-%M-%S", time.localtime(when))


def register() -> None:
    if not OmegaConf.has_resolver("run_stamp"):
        OmegaConf.register_new_resolver("run_stamp", run_stamp, use_cache=True)
    cs = ConfigStore.instance()
    cs.store(name="schema", node=Config)
