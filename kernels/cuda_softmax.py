"""The seed's CUDA row-softmax kernels (kernels/softmax.cu) as a differentiable callable for the
naive attention path: `attention.softmax=cuda_block|cuda_warp|cuda_adaptive`.

cuda_adaptive picks per call: rows of length >= threshold go to the block-per-row kernel
(enough work per row for 256 threads), shorter rows to the warp-per-row kernel (8 rows per
block, no shared memory or block syncs).
"""
import torch

from . import cuda_build

VARIANTS = {"cuda_block": 0, "cuda_warp": 1}  # kernel ids understood by softmax_forward
DTYPES = (torch.float32, torch.bfloat16)


def kernel_for(variant: str, n: int, threshold: int) -> int:
    """Kernel id for rows of length n under `variant` (the adaptive rule lives here)."""
    if variant == "cuda_adaptive":
        return VARIANTS["cuda_block"] if n >= threshold else VARIANTS["cuda_warp"]
    return VARIANTS[variant]


def softmax_forward(x: torch.Tensor, kernel: int, out: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax over x's last dim with one kernel; `out` (contiguous, x's shape) lets a test
    poison the output first."""
    if x.dtype not in DTYPES:
        raise ValueError(f"CUDA softmax takes float32 or bfloat16, not {x.dtype}")
    x = x.contiguous()
    out = torch.empty_like(x) if out is None else out
    cuda_build.load().softmax_forward(x, out, kernel)
    return out


def softmax_backward(y: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Analytic softmax gradient y * (g - sum(g * y)), in fp32 for bf16 inputs."""
    yf, gf = y.float(), g.float()
    return (yf * (gf - (gf * yf).sum(-1, keepdim=True))).to(y.dtype)


class _SoftmaxFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, kernel):
        y = softmax_forward(x, kernel)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return softmax_backward(y, g), None


class CudaSoftmax:
    """Callable softmax over the last dim (fp32 or bf16; -inf entries allowed, a row needs one
    finite entry), differentiable through an analytic torch backward."""

    def __init__(self, variant: str = "cuda_adaptive", threshold: int = 1024):
        if variant not in (*VARIANTS, "cuda_adaptive"):
            raise ValueError(f"attention.softmax={variant!r}: choose cuda_block, cuda_warp or cuda_adaptive")
        self.name, self.threshold = variant, int(threshold)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return _SoftmaxFn.apply(x, kernel_for(self.name, x.size(-1), self.threshold))

    def check(self, device) -> None:
        cuda_build.require_cuda(f"attention.softmax={self.name}", device)

    def __repr__(self):
        return f"CudaSoftmax({self.name!r}, threshold={self.threshold})"
