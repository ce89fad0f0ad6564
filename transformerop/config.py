"""Typed config schema. Each dataclass mirrors one config group under conf/ and is stored in
Hydra's ConfigStore, so a wrong type (`model.n_layer=abc`) or an unknown key fails at compose
time with Hydra's own message naming the field. The yaml options hold only what differs from
these defaults.

Numeric fields declare their valid range beside their default (`num(default, gt=0)`);
config_check.check(cfg) enforces the ranges and refuses keys the schema does not know."""
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING as CHOSEN_BY_DEFAULTS
from omegaconf import OmegaConf

from .clock import run_stamp
from .data import DATASETS
from .decode import PATHS
from .model import BACKENDS, MODELS
from .model.attention.softmax import SOFTMAXES
from .model.attention.triton import TritonAttention
from .runtime import DTYPES
from .tasks import TASKS


def choices(name: str, names) -> type:
    """A str-valued Enum of the option names a registry holds: a wrong name fails at compose time,
    and a new registry line is a new valid value with nothing else to edit."""
    return StrEnum(name, {n: n for n in names})


Task = choices("Task", TASKS)
TileCost = choices("TileCost", ("rounds", "bytes"))
AttnProj = choices("AttnProj", ("auto", "row", "head"))
AttnForward = choices("AttnForward", TritonAttention.forwards)
AttnDq = choices("AttnDq", TritonAttention.dq_modes)
Model = choices("Model", MODELS)
Data = choices("Data", DATASETS)
Attention = choices("Attention", BACKENDS)
Softmax = choices("Softmax", SOFTMAXES)
DecodePath = choices("DecodePath", PATHS)
Dtype = choices("Dtype", DTYPES)
Gelu = choices("Gelu", ("erf", "tanh"))
BenchTarget = choices("BenchTarget", ("matmul", "softmax", "attention", "forward", "train_step", "generate"))
SlowPath = choices("SlowPath", ("none", "host_sync", "h2d_copy"))
Logger = choices("Logger", ("wandb", "none"))
LoggerMode = choices("LoggerMode", ("offline", "online", "disabled"))
Console = choices("Console", ("wrap", "redirect", "off", "auto"))
LoggerStart = choices("LoggerStart", ("first_step", "train_end"))


def num(default, *, gt=None, ge=None, lt=None, le=None, power_of_two: bool = False):
    """A numeric field and its valid range (None bounds are open)."""
    return field(default=default, metadata={"range": (gt, ge, lt, le), "power_of_two": power_of_two})


@dataclass
class TaskConfig:
    name: Task = Task.train


@dataclass
class ModelConfig:
    name: Model = Model.gpt
    n_layer: int = num(6, ge=0)
    n_head: int = num(6, ge=1)
    n_embd: int = num(384, ge=1)
    block_size: int = num(256, ge=1)
    dropout: float = num(0.2, ge=0.0, lt=1.0)
    bias: bool = True
    fused_norm: bool = False  # each residual add + dropout + LayerNorm as one Triton kernel (CUDA)
    fused_mlp: bool = False  # the MLP's GELU in its matmul kernels' epilogues, forward and backward (CUDA)
    dense_embedding_grad: bool = False  # wte's gradient as one_hot(idx)^T @ grad (vocab <= n_embd), wpe's a batch sum
    # the residual stream's dtype under bf16 autocast: float32 (autocast's: a bf16 branch joins an
    # fp32 stream) or bfloat16 (half the bytes through every residual add and LayerNorm, and its
    # gradient in bf16 too: a different rounding, not the same arithmetic)
    stream_dtype: Dtype = Dtype.float32
    # the tied head and its cross-entropy as two Triton kernels (CUDA), forward and backward: the
    # logits are not written (a vocabulary of at most 256; a larger one keeps the plain head)
    fused_head: bool = False
    # the MLP's GELU: erf (exact, F.gelu's default) or tanh (GPT-2's approximation)
    gelu: Gelu = Gelu.erf
    # c_fc's matmul and the gradient into its GELU on cuBLASLt with the GELU in their epilogues
    # (kernels/cublaslt_mlp.cpp): no GELU pass of its own either way (CUDA, bf16; its GELU is tanh)
    cublaslt_mlp: bool = False


@dataclass
class DataConfig:
    name: Data = Data.addition
    # text data: `file` is looked up beside transformerop/data/ (files the package ships), then in
    # cache_dir (None: <repo>/data, or $TRANSFORMEROP_DATA); downloaded from `url` when missing
    file: str = "tinyshakespeare.txt"
    cache_dir: Optional[str] = None
    url: Optional[str] = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
    sha256: str = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
    train_frac: float = num(0.9, gt=0.0, lt=1.0)
    n_digits: int = num(2, ge=1, le=4)  # addition: operands have this many digits
    n_test: int = num(1000, ge=1)  # addition: held-out sums never seen in training
    split_seed: int = 2  # addition: the train/test split depends only on this


@dataclass
class AttentionConfig:
    name: Attention = CHOSEN_BY_DEFAULTS  # the attention group's option (conf/config.yaml's defaults pick one)
    version: int = 5  # cuda: kernel ladder v1..v5
    softmax: Softmax = Softmax.torch  # naive: the row softmax
    softmax_threshold: int = num(1024, ge=1)  # cuda_adaptive: rows at least this long use the block kernel
    allow_tf32: bool = True  # triton, fp32: TF32 tensor cores in tl.dot (false: IEEE fp32)
    cpp_launch: bool = True  # triton on CUDA: a C++ op, autograd node and launch (false: Python's, for debugging)
    forward: AttnForward = AttnForward.tl  # triton: its forward kernel (gluon: kernels/gluon_attention.py, sm_90, bf16)
    dq: AttnDq = AttnDq.query_tiles  # triton: its backward's dQ (atomic: the dK/dV programs add it in fp32 atomics)


@dataclass
class DecodeConfig:
    name: DecodePath = CHOSEN_BY_DEFAULTS  # the decode group's option (conf/config.yaml's defaults pick one)
    keep: Optional[int] = num(None, ge=1)  # past block_size: re-prefill the last `keep` tokens (None: block_size // 2)
    # a fused decode step's matvec tile: outputs per program and reduction chunk. Fewer outputs per
    # program = more programs on the SMs; a sweep over them decides, not a guess.
    block_n: int = num(4, ge=1, power_of_two=True)
    block_k: int = num(128, ge=16, power_of_two=True)
    # the one-launch path's tensor-core tiles (decode/persistent.py, batch >= 2) keep a program's
    # weight load rounds fewest (rounds) or the bytes it loads fewest, counting the batch's stream
    # that narrow tiles reread for every tile and chunk (bytes: faster where the two differ, on the H200)
    tile_cost: TileCost = TileCost.bytes
    # who adds the one-launch path's attention projection: each (row, head) item for its own row,
    # or (head, chunk) items for every row at once, each block of W_proj read once instead of once
    # a row, after one more hand-over (head); auto: head where the bytes it saves outweigh that
    # hand-over (decode/persistent.py: plan)
    attn_proj: AttnProj = AttnProj.auto
    # the one-launch path's weight-chunk loops keep up to this many chunks in flight (copied into
    # shared memory ahead of their use): a program streaming a large layer waits on one load at a
    # time otherwise; the plan keeps the pipeline shallower than the MLP's loop (one stage: none)
    stages: int = num(3, ge=1, le=4)
    # the one-launch path moves a LayerNorm past the products that follow it where a phase takes
    # more than one round of loads: no pass over the stream before its first product
    fold_ln: bool = True
    # the one-launch path's batch-1 MLP, where one chunk covers its outputs: each program sums its
    # tiles' shares and adds them once, instead of every tile adding onto the same addresses
    add_once: bool = False
    # the one-launch path's plan choices set by hand, the rest planned around them
    # (decode/persistent_plan.py), to A/B them through the whole pipeline: +decode.tiles.STAGES=2
    # (the + adds a key to the empty dict), '++decode.tiles={DOT_FC:true,BN_FC:64}' (a set)
    tiles: Dict[str, Any] = field(default_factory=dict)


@dataclass
class TrainConfig:
    max_iters: int = num(5000, ge=0)
    batch_size: int = num(64, ge=1)
    lr: float = num(1e-3, gt=0.0)
    min_lr: float = num(1e-4, ge=0.0)
    warmup_iters: int = num(100, ge=0)
    weight_decay: float = num(0.1, ge=0.0)
    beta1: float = num(0.9, ge=0.0, lt=1.0)
    beta2: float = num(0.99, ge=0.0, lt=1.0)
    grad_clip: float = num(1.0, ge=0.0)  # 0: no clipping
    grad_accum: int = num(1, ge=1)
    eval_interval: int = num(500, ge=1)
    eval_iters: int = num(200, ge=1)
    eval_batch_size: Optional[int] = num(None, ge=1)  # whole-split evals: windows per forward (None: batch_size)
    eval_full: bool = False  # in-loop evals: every window of each split once instead of eval_iters batches
    eval_train: bool = True  # in-loop evals estimate the train split too (false: val only; train loss from the steps)
    dtype: Dtype = Dtype.float32  # bfloat16: autocast (train), weights cast (generate)
    compile: bool = False
    # bf16: every Linear's weight held in bf16 as the model's parameter, its fp32 master in the
    # optimizer (transformerop/master_weights.py): two multi-tensor copies a step in place of
    # autocast's two casts a weight, the same arithmetic
    master_weights: bool = False
    # with master_weights (CUDA): the held weights' clip and AdamW as two Triton kernels over flat
    # buffers, the bf16 copies written in the same pass (transformerop/fused_step.py); fp32 rounding
    # apart, torch's fused AdamW's arithmetic
    fused_step: bool = False
    cuda_graph: bool = False  # capture the whole train step in one CUDA graph (CUDA, grad_accum 1, 1 rank)
    resume: Any = True  # true: latest checkpoint in the run dir; false; or a checkpoint path
    checkpoint: bool = True
    sample_tokens: int = num(200, ge=0)  # text: characters sampled at the end
    # stop once the whole val split's loss is <= this; time_to_target_s counts from process launch
    target_loss: Optional[float] = num(None, gt=0.0)
    slow_path: SlowPath = SlowPath.none  # planted slowdown for the measurement tests
    progress: bool = True
    profile: bool = False  # CUDA, task=train: after the run, kernel time over 10 more steps (not saved)


@dataclass
class GenerateConfig:
    tokens: int = num(500, ge=1)
    batch_size: int = num(1, ge=1)
    prompt: str = "\n"
    temperature: float = num(1.0, ge=0.0)  # 0 = greedy
    top_k: Optional[int] = num(None, ge=1)
    checkpoint: Optional[str] = None  # None: train in this job first
    repeats: int = num(5, ge=1)
    profile: bool = False  # CUDA: after timing, GPU kernel time per token (what bounds decode)


@dataclass
class BenchConfig:
    target: BenchTarget = BenchTarget.train_step
    batch_size: Optional[int] = num(None, ge=1)  # None: train.batch_size
    seq_len: Optional[int] = num(None, ge=1)  # None: model.block_size
    rows: Optional[int] = num(None, ge=1)  # softmax: row count (None: B*heads*T)
    cols: Optional[int] = num(None, ge=1)  # softmax: row length (None: T)
    backward: bool = True  # attention: also time forward+backward
    graph: bool = False  # forward, attention: replay a captured CUDA graph instead of eager launches
    profile: bool = False  # CUDA: after timing, GPU kernel time per call (host-bound or kernel-bound?)
    warmup_ms: float = num(25.0, gt=0.0)
    rep_ms: float = num(100.0, gt=0.0)
    flag_ratio: float = num(3.0, gt=1.0)  # measured/predicted beyond this (or below 1/this) is flagged


@dataclass
class LoggerConfig:
    name: Logger = Logger.wandb
    mode: LoggerMode = LoggerMode.offline
    project: str = "transformerop"
    entity: Optional[str] = None
    console: Console = Console.wrap  # W&B console capture
    system_metrics: bool = True  # W&B system metrics (GPU utilisation and memory, CPU)
    # When the W&B run starts, in a background thread (importing wandb and starting its run is
    # seconds of Python, which takes the GIL from whatever runs beside it): after the first train
    # step (first_step: live curves from the start) or once a train job's loop, sample and profile
    # are over (train_end: what it times runs alone; other tasks start it at the job's end; what
    # was logged before is replayed into the run in order)
    start: LoggerStart = LoggerStart.first_step


@dataclass
class ReportConfig:
    path: Optional[str] = None  # task=report: sweep dir(s), os.pathsep-separated; None = newest sweep


@dataclass
class StudyConfig:
    name: str = ""  # the experiment this job belongs to
    baseline: str = ""  # override string of the row the report divides by, e.g. "train.cuda_graph=false"
    smoke: bool = False  # shrink to CPU size
    # Outside numbers to beat, rendered by the report beside ours (transformerop/report/goals.py):
    # [{what, metric, where, reference, goal | goal_x_baseline, direction, device, note}]
    goals: List[Any] = field(default_factory=list)


@dataclass
class SweepConfig:
    # each job of a multirun in its own fresh process (`python run.py <its overrides>`), with a
    # GPU of its own when there are GPUs: times from launch are then real, and parallel
    # launchers (hydra/launcher=joblib) never put two timing jobs on one GPU
    isolate: bool = False


@dataclass
class SearchConfig:
    # what `main` returns to a hyper-parameter search (hparams_search=NAME, Optuna): these metrics of
    # the job's results.json (or its wall_s), one value or a tuple, in the order of the search's directions
    objectives: List[str] = field(default_factory=list)


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
    sweep: SweepConfig = field(default_factory=SweepConfig)
    search: SearchConfig = field(default_factory=SearchConfig)
    device: str = "auto"  # auto: cuda, else mps, else cpu
    seed: int = 1337
    rerun: bool = False  # a relaunched sweep skips jobs whose results.json says ok unless true
    tags: List[str] = field(default_factory=list)


def register() -> None:
    """The schema, and one config option per registry entry: `attention=NAME`, `decode=NAME` and
    `task=NAME` work for every registered backend, path and task with no yaml file to write."""
    if not OmegaConf.has_resolver("run_stamp"):
        OmegaConf.register_new_resolver("run_stamp", run_stamp, use_cache=True)
    cs = ConfigStore.instance()
    cs.store(name="schema", node=Config)
    for group, names in (("attention", BACKENDS), ("decode", PATHS), ("task", TASKS)):
        for name in names:
            cs.store(group=group, name=name, node={"name": name})
