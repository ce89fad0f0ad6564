"""a^T b for tall a (K, N) and b (K, C) whose product (N, C) is small: the weight gradients of the
token embedding (a one-hot of 16,384 tokens into 65 rows) and of the tied head (65 x 384).

As one matmul, cuBLAS tiles the small (N, C) output into a handful of blocks, each looping over
the whole of K, so a few SMs of 132 work: 34 us (bf16) and 55 us (fp32, IEEE) on the H100 for
these two. Cut into S slices of K, the S partial products run side by side as one batched matmul
and a sum adds them, in fp32 in both cases (bf16 operands write fp32 partials: the rounding of the
single matmul, which accumulates in fp32 and rounds once)."""
import torch

MIN_SLICE = 256  # rows of K a slice keeps: shorter slices make more partials than they save


def slices(K: int, max_slices: int = 64) -> int:
    """How many equal slices K is cut into: the most (a power of two up to max_slices) that divide
    K and keep MIN_SLICE rows each; 1 = one plain matmul."""
    s = max_slices
    while s > 1 and (K % s or K // s < MIN_SLICE):
        s //= 2
    return s


def at_b(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a.t() @ b in a's dtype, a (K, N), b (K, C) of one dtype."""
    K, N = a.shape
    C = b.shape[1]
    s = slices(K)
    half = a.dtype in (torch.float16, torch.bfloat16)
    if s == 1 or (half and not a.is_cuda):  # bf16 into fp32 partials: a CUDA matmul form only
        return a.t() @ b
    a3, b3 = a.reshape(s, K // s, N).transpose(1, 2), b.reshape(s, K // s, C)
    part = torch.bmm(a3, b3, out_dtype=torch.float32) if half else torch.bmm(a3, b3)
    return part.sum(0).to(a.dtype)
