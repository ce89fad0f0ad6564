"""model.cublaslt_mlp: the MLP y = GELU(x W1^T) W2^T with its GELU inside cuBLASLt's matmuls
(kernels/cublaslt_mlp.cpp), forward and backward.

Eagerly, c_fc's matmul writes h (50 MB at 16,384 x 1,536 bf16) and a GELU pass reads it and writes
g; backward, the matmul dy W2 writes dg and the GELU's backward reads dg and h and writes dh. Here
the forward matmul writes g and h in one pass (GELU_AUX) and the backward's writes dh directly
(DGELU, reading h), so each way loses one full pass over an (M, 4C) tensor and one launch. The
weight gradients and dx stay plain cuBLAS matmuls. cuBLASLt's GELU is the tanh form, so the model
must be built with model.gelu=tanh: the same function as its eager path then.

The two matmuls are a small C library (kernels/cublaslt_mlp.cpp, built by load_inline without
torch's headers, so a fresh machine's first launch waits a fraction of a second for it, not
seconds) called through ctypes, which lets go of the GIL during each call; Library below is its
torch side.
"""
import ctypes
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


FUNCTIONS = ("tfo_lt_up_gelu", "tfo_lt_dgelu", "tfo_lt_status_string", "tfo_lt_plan_count", "tfo_lt_plans",
             "tfo_lt_version")  # the C library's exports
EXTENSION = cuda_build.Extension("tfo_cublaslt_mlp", "the cuBLASLt GELU matmuls", lambda: ([SOURCE.read_text()], []),
                                 FUNCTIONS, _cublaslt, c_library=True)
WORKSPACE_BYTES = 32 << 20  # what cuBLAS recommends on Hopper
PLAN_FIELDS = 8  # numbers a plan: epilogue, m, n, k, rank chosen, candidates timed, its median us, the first's us
_P, _I64, _SIZE = ctypes.c_void_p, ctypes.c_int64, ctypes.c_size_t


class Library:
    """The C library's calls on tensors: operands checked (one line each), outputs allocated, the
    caller's current stream and a workspace a device passed in; its errors raised as RuntimeError."""

    def __init__(self, lib: ctypes.CDLL):
        self.lib = lib
        gemm = [ctypes.c_int, _P, _P, _SIZE, _P, _P, _P, _P, _I64, _I64, _I64]
        for name in ("tfo_lt_up_gelu", "tfo_lt_dgelu"):
            getattr(lib, name).argtypes, getattr(lib, name).restype = gemm, ctypes.c_int
        lib.tfo_lt_status_string.argtypes, lib.tfo_lt_status_string.restype = [ctypes.c_int], ctypes.c_char_p
        lib.tfo_lt_plan_count.argtypes, lib.tfo_lt_plan_count.restype = [], _I64
        lib.tfo_lt_plans.argtypes, lib.tfo_lt_plans.restype = [ctypes.POINTER(ctypes.c_double), _I64], _I64
        lib.tfo_lt_version.argtypes, lib.tfo_lt_version.restype = [], _I64
        self.workspaces = {}  # device index -> its workspace, kept for the process

    def _call(self, fn, what: str, device: torch.device, *args) -> None:
        dev = device.index if device.index is not None else torch.cuda.current_device()
        ws = self.workspaces.get(dev)
        if ws is None:  # the workspace here, the handle in C: both once a device, outside any capture
            if torch.cuda.is_current_stream_capturing():
                raise RuntimeError(f"{what}: the first call on cuda:{dev} must happen outside CUDA graph capture "
                                   "(it makes the workspace and the cuBLASLt handle; warmups() does it)")
            ws = self.workspaces[dev] = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=device)
        stream = torch.cuda.current_stream(dev).cuda_stream
        status = fn(dev, stream, ws.data_ptr(), WORKSPACE_BYTES, *args)
        if status != 0:
            raise RuntimeError(f"{what}: {self.lib.tfo_lt_status_string(status).decode()}")

    def mlp_up_gelu(self, x, w1):
        """g, h (..., N) = GELU_tanh(x w1^T), x w1^T for x (..., K), w1 (N, K)."""
        _operands(x=x, w1=w1)
        if x.dim() < 2 or w1.dim() != 2 or w1.shape[1] != x.shape[-1]:
            raise ValueError(f"x must be (..., K) and w1 (N, K), got {tuple(x.shape)} and {tuple(w1.shape)}")
        K, N = x.shape[-1], w1.shape[0]
        _multiples_of_8(K=K, N=N)
        g = x.new_empty(*x.shape[:-1], N)
        h = torch.empty_like(g)
        if g.numel():
            self._call(self.lib.tfo_lt_up_gelu, "mlp_up_gelu (GELU_AUX)", x.device, x.data_ptr(), w1.data_ptr(),
                       g.data_ptr(), h.data_ptr(), x.numel() // K, N, K)
        return g, h

    def mlp_dgelu(self, dy, w2, h):
        """dh (..., N) = (dy w2) * GELU_tanh'(h) for dy (..., C), w2 (C, N), h (..., N)."""
        _operands(dy=dy, w2=w2, h=h)
        if dy.dim() < 2 or w2.dim() != 2 or w2.shape[0] != dy.shape[-1]:
            raise ValueError(f"dy must be (..., C) and w2 (C, N), got {tuple(dy.shape)} and {tuple(w2.shape)}")
        C, N = dy.shape[-1], w2.shape[-1]
        M = dy.numel() // C if C else 0
        if h.shape[-1] != N or h.numel() != M * N:
            raise ValueError(f"h must be (..., {N}) matching dy's leading dims, got {tuple(h.shape)}")
        _multiples_of_8(C=C, N=N)
        dh = torch.empty_like(h)
        if dh.numel():
            self._call(self.lib.tfo_lt_dgelu, "mlp_dgelu (DGELU)", dy.device, dy.data_ptr(), w2.data_ptr(),
                       h.data_ptr(), dh.data_ptr(), M, N, C)
        return dh

    def plan_count(self) -> int:
        return self.lib.tfo_lt_plan_count()

    def plans(self) -> list[float]:
        """Every plan made, PLAN_FIELDS numbers a plan, flat."""
        room = max(self.plan_count(), 1)
        while True:
            out = (ctypes.c_double * (PLAN_FIELDS * room))()
            n = self.lib.tfo_lt_plans(out, room)
            if n <= room:  # another thread may have made plans since the count
                return list(out[:PLAN_FIELDS * n])
            room = n

    def cublaslt_version(self) -> int:
        return self.lib.tfo_lt_version()


def _operands(**tensors) -> None:
    """Each operand a contiguous, 16-byte-aligned bf16 CUDA tensor, all on one device (cuBLASLt's
    rules for these epilogues)."""
    devices = {t.device for t in tensors.values()}
    for name, t in tensors.items():
        if not t.is_cuda or t.dtype != torch.bfloat16 or not t.is_contiguous() or t.data_ptr() % 16:
            raise ValueError(f"{name} must be a contiguous, 16-byte-aligned bfloat16 CUDA tensor, got {t.dtype} "
                             f"on {t.device}{'' if t.is_contiguous() else ', not contiguous'}")
    if len(devices) > 1:
        raise ValueError(f"{', '.join(tensors)} on different devices: {sorted(map(str, devices))}")


def _multiples_of_8(**dims) -> None:
    for name, n in dims.items():
        if n % 8:
            raise ValueError(f"{name} = {n} must be a multiple of 8 (cuBLASLt's rule for the aux's leading dimension)")


@functools.cache
def _ext() -> Library:
    """The built library, looked up once (not under cuda_build's lock on every call)."""
    return Library(cuda_build.load(ext=EXTENSION))


def plans() -> list[tuple]:
    """Every cuBLASLt plan this process made: (epilogue, m, n, k, heuristic rank chosen, candidates
    timed, median µs, the heuristic's first choice's µs), as cuBLASLt sees the product."""
    flat = _ext().plans()
    return [(*map(int, flat[i:i + 6]), *flat[i + 6:i + PLAN_FIELDS]) for i in range(0, len(flat), PLAN_FIELDS)]


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
