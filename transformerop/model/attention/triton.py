"""Fused causal attention through the Triton kernels in kernels/triton_attention.py.

Forward and backward are Triton kernels (backward = "kernel"). Attention dropout (model.dropout,
in training) is fused into both: the backward regenerates the forward's mask from its seed.
fp32 matmuls use TF32 tensor cores unless `attention.allow_tf32=false` is given. Decoding works
against a growing KV cache; an explicit mask (the preallocated caches) is refused.

On CUDA the kernels run behind a C++ op (kernels/triton_attention_op.py: its autograd node and
launches are C++, so an eager call pays little host time); `attention.cpp_launch=false` keeps the
Python autograd.Function and launch path, which the interpreter always uses.

`attention.dq=atomic` has the backward's key-tile programs add their share of dQ in fp32 atomics
(five products a tile; the default, query_tiles, gives dQ programs of their own that compute the
scores and dP again: seven, no atomics), behind the same C++ op.

`attention.forward=gluon` runs the forward of kernels/gluon_attention.py instead (sm_90, bf16:
each key tile's softmax under the previous tile's P V on the tensor cores), with the same
backward; its launches are Python's (the C++ op launches the tl kernels only), and calls it does
not take (decode's single queries) run the tl forward.
"""
import functools
import importlib
import math

import torch

from ...runtime import interpreting, torch_dtype
from .base import BackendUnavailable, CausalSelfAttention, SplitHeads


@functools.cache  # attend() runs per layer per step: import once
def _kernels():
    """kernels.triton_attention, imported when this backend is first used (Triton loads then)."""
    return importlib.import_module("kernels.triton_attention")


@functools.cache
def _op():
    """kernels.triton_attention_op with its C++ extension loaded (built on first use, then cached)."""
    op = importlib.import_module("kernels.triton_attention_op")
    op.load()
    return op


class TritonAttention(CausalSelfAttention):
    supports_cache = True
    accepts_mask = False  # causal only: no masked preallocated caches
    dtypes = ("float32", "bfloat16")
    backward = "kernel"
    forwards = ("tl", "gluon")  # attention.forward: this backend's forward kernels
    dq_modes = ("query_tiles", "atomic")  # attention.dq: how its backward gets dQ
    packed_grads = True  # kernels/triton_attention.py's _grads_like
    head_dims = (16, 32, 64, 128)  # kernels/triton_attention.py's tiles: a power of two, 16 to 128

    def __init__(self, mcfg, acfg):
        super().__init__(mcfg, acfg)
        self.allow_tf32 = bool(getattr(acfg, "allow_tf32", True))  # schema default True; bare dicts too
        self.forward_kernel = str(getattr(acfg, "forward", "tl"))
        self.dq_mode = str(getattr(acfg, "dq", "query_tiles"))
        # the C++ op launches the tl forward only: a Gluon forward goes through the Python path
        self.cpp_launch = bool(getattr(acfg, "cpp_launch", True)) and not interpreting() and self.forward_kernel == "tl"
        _kernels()  # import now: a missing kernels/ fails at build, not mid-step

    @classmethod
    def precision(cls, dtype_name, acfg, device):
        """fp32 runs on TF32 tensor cores unless attention.allow_tf32=false (the interpreter: numpy, IEEE)."""
        if dtype_name == "float32" and getattr(acfg, "allow_tf32", True) and torch.device(device).type == "cuda":
            return "tf32"
        return super().precision(dtype_name, acfg, device)

    @classmethod
    def variants(cls, name):
        """Both launch paths (the C++ op, the Python autograd.Function) and the Gluon forward."""
        return [(name, {"name": name}), (f"{name}_python_launch", {"name": name, "cpp_launch": False}),
                (f"{name}_gluon_forward", {"name": name, "forward": "gluon"}),
                (f"{name}_atomic_dq", {"name": name, "dq": "atomic"})]

    @classmethod
    def check(cls, cfg, device):
        super().check(cfg, device)
        interpret = interpreting()
        if not interpret and (torch.device(device).type != "cuda" or not torch.cuda.is_available()):
            raise BackendUnavailable("attention=triton needs a CUDA GPU (none here; TRITON_INTERPRET=1 "
                                     "runs it on CPU, slowly)")
        try:
            import triton  # noqa: F401
        except ImportError as e:
            raise BackendUnavailable(f"attention=triton needs the triton package ({e})") from None
        forward = str(getattr(cfg.attention, "forward", "tl"))
        if forward not in cls.forwards:
            raise ValueError(f"attention.forward={forward}: choose one of {', '.join(cls.forwards)}")
        if forward == "gluon":
            _check_gluon(cfg, device, interpret)
        if interpret:
            _check_interpretable(cfg)
        elif getattr(cfg.attention, "cpp_launch", True) and forward == "tl":
            importlib.import_module("kernels.triton_attention_op").require(device)

    @classmethod
    def kernel_warmups(cls, cfg, device) -> list:
        """The train step's attention forward and backward (train.batch_size x block_size windows,
        the model's dropout) and the evaluation's forward (train.eval_batch_size, none), on zeros
        laid out as the model's heads are (views of one (B, T, 3, H, D) buffer): each compiles, or
        loads, the kernel of the config its shape picks, as the step's own call would. The backward
        is a call of its own, so its compile runs beside the forward's: through autograd it waited
        for the forward's (a fresh H100 host: forward 2.08 -> 3.59 s, backward 3.89 -> 5.08 s,
        experiments/results/h100-2026-12-07d). Only where kernels/triton_tuned.json ships that
        config (a shape to tune is tuned by the job's own first call, not beside other warm-ups).
        A fixed dropout seed: nothing random is drawn."""
        m, t, a = cfg.model, cfg.train, cfg.attention
        H, D, T, dtype = m.n_head, m.n_embd // m.n_head, m.block_size, torch_dtype(t.dtype)
        opts = dict(causal=True, sm_scale=1.0 / math.sqrt(D), allow_tf32=bool(getattr(a, "allow_tf32", True)),
                    forward=str(getattr(a, "forward", "tl")), dq=str(getattr(a, "dq", "query_tiles")))

        def heads(B, grad):  # c_attn's output split as the model splits it
            return SplitHeads.apply(torch.zeros(B, T, 3 * H * D, dtype=dtype, device=device, requires_grad=grad), H)

        from kernels.triton_launch import shipped_only

        def train_forward():
            with torch.no_grad(), shipped_only():
                _kernels().attention(*heads(t.batch_size, False), dropout_p=m.dropout, seed=0, **opts)

        def train_backward():  # on made-up saved tensors: compiled beside the forward, not after it
            K, B = _kernels(), t.batch_size
            o = K._bthd(B, H, T, D, dtype, device).zero_()  # O and dO laid out as the step's: (B, T, H, D)
            lse = torch.zeros(B * H, T, dtype=torch.float32, device=device)
            seed = K.seed_tensor(0, device) if m.dropout > 0 else None
            with shipped_only():
                K._backward(torch.zeros_like(o), *heads(B, False), o, lse, True, opts["sm_scale"], opts["allow_tf32"],
                            m.dropout, seed, opts["dq"])

        def evaluate():
            with torch.no_grad(), shipped_only():
                _kernels().attention(*heads(getattr(t, "eval_batch_size", None) or t.batch_size, False), **opts)
        return [train_forward, train_backward, evaluate]

    def attend(self, q, k, v, mask):
        if mask is not None:
            raise ValueError("attention=triton is causal only and takes no explicit mask: use a decode path "
                             "without one")
        p = self.dropout if self.training else 0.0
        if self.cpp_launch and q.is_cuda:
            return _op().attention(q, k, v, True, self.scale, self.allow_tf32, p, None, self.dq_mode == "atomic")
        return _kernels().attention(q, k, v, causal=True, sm_scale=self.scale, allow_tf32=self.allow_tf32,
                                    dropout_p=p, forward=self.forward_kernel, dq=self.dq_mode)


def _check_gluon(cfg, device, interpret: bool) -> None:
    """attention.forward=gluon: a Hopper GPU, bf16 and a head dim the kernel has tiles for, or one
    line saying which is missing."""
    if interpret or torch.device(device).type != "cuda" or not torch.cuda.is_available() or \
            torch.cuda.get_device_capability(device)[0] != 9:
        raise BackendUnavailable("attention.forward=gluon needs a Hopper GPU (sm_90: TMA and warp-group MMAs); "
                                 "attention.forward=tl runs elsewhere")
    try:
        from kernels import gluon_attention
    except ImportError as e:
        raise BackendUnavailable(f"attention.forward=gluon needs a Triton with Gluon's Hopper ops ({e})") from None
    if cfg.train.dtype != "bfloat16":
        raise ValueError(f"attention.forward=gluon runs bf16, not train.dtype={cfg.train.dtype}: "
                         "set train.dtype=bfloat16 or attention.forward=tl")
    m = cfg.model
    D = m.n_embd // m.n_head
    if D not in gluon_attention.CONFIGS:
        raise ValueError(f"attention.forward=gluon has tiles for head dim {sorted(gluon_attention.CONFIGS)}, "
                         f"not model.n_embd / model.n_head = {D}: set attention.forward=tl")


# The Triton interpreter runs each kernel program as numpy on the CPU: ~10 ms a program here.
INTERPRETER_S_PER_PROGRAM = 0.01
INTERPRETER_BUDGET_S = 30 * 60


def _check_interpretable(cfg) -> None:
    """Under TRITON_INTERPRET=1: bf16 is refused (the interpreter hands bf16 bit patterns to
    np.matmul, so its bf16 dots are garbage), and so are task=validate and a training job whose
    kernel programs alone would take hours (with the sizes to shrink) -- the interpreter is for
    checking kernels."""
    if cfg.train.dtype == "bfloat16":
        raise BackendUnavailable("attention=triton in bf16 needs a GPU: the Triton interpreter (TRITON_INTERPRET=1) "
                                 "computes bf16 dots wrongly; use train.dtype=float32 there")
    if cfg.task.name == "validate":
        raise BackendUnavailable("attention=triton under TRITON_INTERPRET=1 is checked by "
                                 "tests/test_triton_attention.py at small shapes; task=validate's would take hours")
    m, t = cfg.model, cfg.train
    if cfg.task.name not in ("train", "generate") or getattr(cfg.generate, "checkpoint", None) or m.n_layer == 0:
        return
    addition = cfg.data.name == "addition"
    T = 3 * cfg.data.n_digits + 2 if addition else m.block_size
    fwd, bwd = -(-T // 32), 2 * -(-T // 16)  # programs per (batch row, head): the interpreter's tiles
    rows = t.max_iters * t.grad_accum * t.batch_size * (fwd + bwd)  # training steps
    evals = t.max_iters // t.eval_interval + 1
    eval_rows = t.eval_iters * t.batch_size * (1 + (not addition and t.eval_train))
    eval_rows += cfg.data.n_test * (1 + cfg.data.n_digits + 1) if addition else 0  # val loss + greedy answers
    rows += evals * eval_rows * fwd
    seconds = rows * m.n_layer * m.n_head * INTERPRETER_S_PER_PROGRAM
    if seconds > INTERPRETER_BUDGET_S:
        raise ValueError(f"attention=triton under TRITON_INTERPRET=1: this job runs ~{seconds / 3600:.1f} h of "
                         "interpreted kernels (train.max_iters, batch_size, evals); shrink "
                         "the job (e.g. train.max_iters=20 train.batch_size=8 train.eval_iters=1 data.n_test=50) "
                         "or run it on a GPU")
