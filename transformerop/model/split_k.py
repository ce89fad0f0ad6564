"""a^T b for tall, narrow a (N, r) and b (N, c): the weight gradients whose output is small and whose
sum runs over every token -- the tied embedding's two (one_hot^T g, the head's g^T x: 65 x 384 over
16,384 tokens at the seed's step).

One matmul of that shape has a handful of output tiles (65 x 384 is about six), so cuBLAS runs it on
six SMs of 132: on the H200 the fp32 one took 54.6 µs (a SIMT kernel) and the bf16 one 34.3 µs, where
the bytes and flops need a few µs. Here the tokens are cut into `splits` equal runs, one batched
matmul makes each run's partial product (every SM busy) and a sum adds the partials, in fp32."""
import torch

MIN_ROWS = 256  # rows a run at least: shorter runs are all prologue and epilogue
MAX_SPLITS = 32  # partials summed afterwards: (r, c) fp32 each


def splits(n: int) -> int:
    """The runs to cut n rows into: the largest power of two <= MAX_SPLITS that divides n into runs
    of MIN_ROWS or more (1: one plain matmul)."""
    s = MAX_SPLITS
    while s > 1 and (n % s or n // s < MIN_ROWS):
        s //= 2
    return s


def _fp32_partials() -> bool:
    """torch's bmm with an fp32 result from bf16/fp16 operands (the out_dtype overload, CUDA only)."""
    return hasattr(torch.ops.aten.bmm, "dtype")


def t_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a^T b in fp32 for a (N, r), b (N, c) of one dtype. Split, low-precision operands accumulate
    in fp32 and the result is rounded nowhere (one matmul rounds it to their dtype once); fp32 ones
    follow torch's matmul precision setting, as a @ would."""
    n = a.shape[0]
    s = splits(n)
    low = a.dtype in (torch.bfloat16, torch.float16)
    if s == 1 or (low and not (a.is_cuda and _fp32_partials())):
        return (a.t() @ b).float()  # one matmul, as before the split
    a3, b3 = a.reshape(s, n // s, a.shape[1]).transpose(1, 2), b.reshape(s, n // s, b.shape[1])
    part = torch.bmm(a3, b3, out_dtype=torch.float32) if low else torch.bmm(a3, b3)
    return part.sum(0)
