"""a^T b for tall, narrow a (N, r) and b (N, c): the weight gradients whose output is small and whose
sum runs over every token -- the tied embedding's two (one_hot^T g, the head's g^T x: 65 x 384 over
16,384 tokens at the seed's step).

One matmul of that shape has a handful of output tiles (65 x 384 is about six), so cuBLAS runs it on
a few SMs of 132: on the H200 the fp32 one took 54.6 µs (a SIMT kernel) and the bf16 one 34.3 µs, where
the bytes and flops need a few µs. Here the tokens are cut into `splits` equal runs, one batched
matmul makes each run's partial product (more SMs busy) and a sum adds the partials, in fp32. On an
H100 (experiments/results/h100-2026-12-07d): fp32 63.5 -> 54.2 µs, still a CUDA-core kernel on
rows 65 wide; bf16 47.6 -> 34.3 µs, its result no longer rounded to bf16; the train step 0.9%
faster (B A B A). On CUDA the products kernels/triton_tn.py takes (a one-hot's, and 16-bit
operands) go there instead: the split here is for the rest (fp32 operands, CPUs)."""
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


_fp32_ok: dict = {}  # device -> whether torch's bmm gives an fp32 result from bf16/fp16 operands there


def fp32_partials(device) -> bool:
    """Whether torch's bmm makes fp32 results from 16-bit operands on `device` (its out_dtype
    overload, CUDA only), tried once a device on tiny operands -- never inside a CUDA-graph
    capture, which would keep the try as a node: there the answer is False until a call outside
    (the capture's own warm-up calls, on a side stream before it records) has tried."""
    dev = torch.device(device)
    if dev in _fp32_ok:
        return _fp32_ok[dev]
    if dev.type != "cuda" or not hasattr(torch.ops.aten.bmm, "dtype"):
        _fp32_ok[dev] = False
    elif torch.cuda.is_current_stream_capturing():
        return False
    else:
        try:
            a = torch.ones(2, 16, 16, dtype=torch.bfloat16, device=dev)
            _fp32_ok[dev] = bool(torch.bmm(a, a, out_dtype=torch.float32).dtype == torch.float32)
        except (RuntimeError, TypeError, NotImplementedError):
            _fp32_ok[dev] = False
    return _fp32_ok[dev]


def _kernel(a_dtype, b_dtype, r: int, one_hot: bool, device) -> bool:
    """Whether kernels/triton_tn.py's one kernel takes this product (CUDA, its operand kinds)."""
    if torch.device(device).type != "cuda":
        return False
    from kernels.triton_tn import supports
    return supports(a_dtype, b_dtype, r, one_hot)


def one_hot_t_matmul(idx: torch.Tensor, rows: int, g: torch.Tensor) -> torch.Tensor:
    """one_hot(idx, rows)^T g in fp32 for ids idx (...) and g (N, c): on CUDA one kernel that never
    writes the one-hot; elsewhere the one-hot in g's dtype (a memset and a scatter) and t_matmul."""
    idx = idx.reshape(-1)
    if _kernel(None, g.dtype, rows, True, g.device):
        from kernels.triton_tn import tn
        return tn(None, g.contiguous(), idx=idx.contiguous(), R=rows)
    one_hot = torch.zeros(g.shape[0], rows, dtype=g.dtype, device=g.device).scatter_(1, idx.reshape(-1, 1), 1.0)
    return t_matmul(one_hot, g)


def t_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a^T b in fp32 for a (N, r), b (N, c) of one dtype: 16-bit ones on CUDA by kernels/triton_tn.py.
    Split, low-precision operands accumulate in fp32 and the result is rounded nowhere (one matmul
    rounds it to their dtype once); fp32 ones follow torch's matmul precision setting, as a @ would."""
    if _kernel(a.dtype, b.dtype, a.shape[1], False, a.device):
        from kernels.triton_tn import tn
        return tn(a.contiguous(), b.contiguous())
    n = a.shape[0]
    s = splits(n)
    low = a.dtype in (torch.bfloat16, torch.float16)
    if s == 1 or (low and not fp32_partials(a.device)):
        return (a.t() @ b).float()  # one matmul, as before the split
    a3, b3 = a.reshape(s, n // s, a.shape[1]).transpose(1, 2), b.reshape(s, n // s, b.shape[1])
    part = torch.bmm(a3, b3, out_dtype=torch.float32) if low else torch.bmm(a3, b3)
    return part.sum(0)
