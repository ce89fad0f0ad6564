"""model.cublaslt_mlp: the MLP y = GELU(x W1^T) W2^T with its GELU inside cuBLASLt's matmuls
(kernels/cublaslt_mlp.cpp), forward and backward.

Eagerly, c_fc's matmul writes h (50 MB at 16,384 x 1,536 bf16) and a GELU pass reads it and writes
g; backward, the matmul dy W2 writes dg and the GELU's backward reads dg and h and writes dh. Here
the forward matmul writes g and h in one pass (GELU_AUX) and the backward's writes dh directly
(DGELU, reading h), so each way loses one full pass over an (M, 4C) tensor and one launch. The
weight gradients and dx stay plain cuBLAS matmuls. cuBLASLt's GELU is the tanh form, so the model
must be built with model.gelu=tanh: the same function as its eager path then.
"""
import functools
import glob
import os
from pathlib import Path

import torch

from . import cuda_build

SOURCE = Path(__file__).with_suffix(".cpp")


def _cublaslt() -> tuple[list[str], list[str]]:
    """(include dirs, linker flags) for cuBLASLt: the CUDA toolkit's, else the nvidia-cublas wheel's
    that a CUDA build of torch brings."""
    from torch.utils.cpp_extension import CUDA_HOME
    if CUDA_HOME and (Path(CUDA_HOME) / "include" / "cublasLt.h").exists():
        return [], ["-lcublasLt"]
    try:
        import nvidia
        roots = list(nvidia.__path__)
    except ImportError:
        roots = []
    for root in roots:
        for header in glob.glob(os.path.join(root, "**", "include", "cublasLt.h"), recursive=True):
            base = Path(header).parent.parent
            libs = sorted(glob.glob(str(base / "lib" / "libcublasLt.so*")))
            if libs:
                return [str(Path(header).parent)], [libs[0], f"-Wl,-rpath,{Path(libs[0]).parent}"]
    return [], ["-lcublasLt"]


EXTENSION = cuda_build.Extension("tfo_cublaslt_mlp", "the cuBLASLt GELU matmuls", lambda: ([SOURCE.read_text()], []),
                                 ("mlp_up_gelu", "mlp_dgelu", "plan_count", "plans", "cublaslt_version"), _cublaslt,
                                 ops="tfo_cublaslt_mlp")


@functools.cache
def _ext():
    """The built extension, looked up once (not under cuda_build's lock on every call)."""
    return cuda_build.load(ext=EXTENSION)


def plans() -> list[tuple]:
    """Every cuBLASLt plan this process made: (epilogue, m, n, k, heuristic rank chosen, candidates
    timed, median µs, the heuristic's first choice's µs), as cuBLASLt sees the product."""
    flat = _ext().plans()
    return [(*map(int, flat[i:i + 6]), *flat[i + 6:i + 8]) for i in range(0, len(flat), 8)]


def require(device=None) -> None:
    """BackendUnavailable, one line naming what is missing, unless the extension can be built and run."""
    cuda_build.require_cuda("model.cublaslt_mlp=true (cuBLASLt's GELU epilogues)", device, EXTENSION)


class CublasLtGeluMLP(torch.autograd.Function):
    """x (..., C), w1 (4C, C), w2 (C, 4C) -> GELU_tanh(x w1^T) w2^T; in bf16 under autocast (the
    inputs cast as autocast would cast a matmul's)."""

    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda", cast_inputs=torch.bfloat16)
    def forward(ctx, x, w1, w2):
        x, w1, w2 = x.contiguous(), w1.contiguous(), w2.contiguous()
        g, h = _ext().mlp_up_gelu(x, w1)
        ctx.save_for_backward(x, w1, w2, g, h)
        return g @ w2.t()

    @staticmethod
    @torch.amp.custom_bwd(device_type="cuda")
    def backward(ctx, dy):
        x, w1, w2, g, h = ctx.saved_tensors
        dy = dy.to(w2.dtype).contiguous()
        rows = lambda t: t.reshape(-1, t.shape[-1])  # noqa: E731
        dw2 = rows(dy).t() @ rows(g) if ctx.needs_input_grad[2] else None
        dh = _ext().mlp_dgelu(dy, w2, h)  # (dy w2) * GELU'(h), in the matmul's epilogue
        dw1 = rows(dh).t() @ rows(x) if ctx.needs_input_grad[1] else None
        dx = dh @ w1 if ctx.needs_input_grad[0] else None
        return dx, dw1, dw2


def runs_in_bf16(x) -> bool:
    """Whether the MLP's matmuls on x run in bf16: x is bf16, or autocast casts its matmuls to bf16.
    Anything else (a float32 forward outside autocast, as a prefill after training makes) takes the
    eager tanh MLP, the same function: the epilogues here are bf16 only."""
    kind = x.device.type
    if torch.is_autocast_enabled(kind):
        return torch.get_autocast_dtype(kind) == torch.bfloat16
    return x.dtype == torch.bfloat16


def mlp(x, c_fc, c_proj):
    """The MLP body (before its residual dropout) for bias-free Linears c_fc, c_proj; x on a GPU,
    its matmuls in bf16 (runs_in_bf16)."""
    return CublasLtGeluMLP.apply(x, c_fc.weight, c_proj.weight)


def warmups(C: int, device) -> list:
    """One zero-argument call, made before a job's first step (transformerop/cuda_early.py): it
    builds or loads the extension and makes this device's cuBLASLt handle and workspace, so neither
    waits for the first step (or falls inside a CUDA-graph capture)."""
    def call():
        zeros = lambda *shape: torch.zeros(*shape, dtype=torch.bfloat16, device=device)  # noqa: E731
        CublasLtGeluMLP.apply(zeros(16, C), zeros(4 * C, C), zeros(C, 4 * C))
    return [call]
