"""a^T b for a tall, narrow a (n, R <= 256) and b (n, C) as one Triton kernel: the tied embedding's
two weight gradients, the head's g^T x and wte's one_hot(idx)^T g, 65 x 384 over 16,384 tokens
at the seed's step.

Through split_k.py's batched matmuls cuBLAS runs these on kernels made for other shapes: the
one-hot product in fp32 on a SIMT kernel (43.7 µs on the H100 at the seed's step, after the
one-hot's memset and scatter), the head's in bf16 on a cutlass kernel aligned to one element (65
columns; 20.5 µs). Here a program takes ROWS tokens and a block of BC columns and adds a^T b over
them on the tensor cores, R padded to a tile of 128 (or 256: two sizes, so that warm-ups need not
know the vocabulary); torch's sum adds the programs' (R x C) partials. The one-hot is never
written: a program compares its tokens' ids with the tile's rows.

fp32 b (the embedding's gradient under an fp32 stream) is split into three bf16 terms,
b = b1 + b2 + b3 exactly (each the rounding of what the previous ones left), so the products
with 0/1 are exact and only the fp32 sums round: the result is an fp32 sum in another order,
with or without TF32 allowed. Any other fp32 operand stays with split_k.t_matmul."""
import torch
import triton
import triton.language as tl

from . import triton_key  # noqa: F401 -- a fresh process reads Triton's cache key, not re-hashes it

MAX_R = 256
BT, BC, WARPS = 64, 128, 8  # tokens a dot, columns a program (a 128 x 128 fp32 accumulator on 8 warps)
ROWS = 256  # tokens a program: 64 programs a column block at 16,384 tokens


@triton.jit(do_not_specialize=["n", "R"])  # one compile for any token count and vocabulary (warm-ups)
def _tn_partials(A, IDX, B, PART, n, R, C, ONE_HOT: tl.constexpr, SPLIT: tl.constexpr, RP: tl.constexpr,
                 STEPS: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr):
    pid_t, pid_c = tl.program_id(0), tl.program_id(1)
    r = tl.arange(0, RP)
    cols = pid_c * BC + tl.arange(0, BC)
    cmask = cols < C
    acc = tl.zeros((RP, BC), dtype=tl.float32)
    for s in range(STEPS):
        t = (pid_t * STEPS + s) * BT + tl.arange(0, BT)
        tmask = t < n
        if ONE_HOT:  # a^T's tile: row r of token t is 1 where idx[t] == r (padding tokens match no row)
            ids = tl.load(IDX + t, mask=tmask, other=-1)
            a_t = tl.where(r[:, None] == ids[None, :], 1.0, 0.0).to(tl.bfloat16)
        else:
            a_t = tl.load(A + t.to(tl.int64)[None, :] * R + r[:, None], mask=tmask[None, :] & (r[:, None] < R),
                          other=0.0)
        b = tl.load(B + t.to(tl.int64)[:, None] * C + cols[None, :], mask=tmask[:, None] & cmask[None, :], other=0.0)
        if SPLIT:  # b = b1 + b2 + b3 exactly in bf16; a 0/1 times each is exact
            b1 = b.to(tl.bfloat16)
            rest = b - b1.to(tl.float32)
            b2 = rest.to(tl.bfloat16)
            b3 = (rest - b2.to(tl.float32)).to(tl.bfloat16)
            acc = tl.dot(a_t, b1, acc)
            acc = tl.dot(a_t, b2, acc)
            acc = tl.dot(a_t, b3, acc)
        else:
            acc = tl.dot(a_t.to(b.dtype), b, acc)
    offs = pid_t.to(tl.int64) * R * C + r[:, None] * C + cols[None, :]
    tl.store(PART + offs, acc, mask=(r[:, None] < R) & cmask[None, :])


def supports(a_dtype, b_dtype, R: int, one_hot: bool) -> bool:
    """Whether this kernel computes a^T b for these operands: a one-hot a with b in fp32, bf16 or
    fp16, or a and b both bf16 (or both fp16); R <= MAX_R rows of the result."""
    low = (torch.bfloat16, torch.float16)
    if R > MAX_R:
        return False
    if one_hot:
        return b_dtype in low + (torch.float32,)
    return a_dtype == b_dtype and b_dtype in low


def tn(a, b: torch.Tensor, idx=None, R: int | None = None) -> torch.Tensor:
    """a^T b in fp32, (R, C), for a (n, R) and b (n, C) contiguous; or, with idx (n,) of ids in
    [0, R) and a None, one_hot(idx, R)^T b (ids outside it add nothing)."""
    n, C = b.shape
    one_hot = idx is not None
    R = R if one_hot else a.shape[1]
    steps = triton.cdiv(ROWS, BT)
    chunks = triton.cdiv(n, steps * BT)
    part = torch.empty((chunks, R, C), dtype=torch.float32, device=b.device)
    _tn_partials[(chunks, triton.cdiv(C, BC))](
        a if a is not None else b, idx if one_hot else b, b, part, n, R, C, ONE_HOT=one_hot,
        SPLIT=b.dtype == torch.float32, RP=128 if R <= 128 else 256, STEPS=steps, BT=BT, BC=BC,
        num_warps=WARPS)
    return part.sum(0)


def warmups(C: int, device) -> list:
    """A zero-argument call launching the one-hot form a train step's embedding gradient runs
    (fp32, a character vocabulary's tile of 128) at width C on 16 tokens of zeros, before a job's
    first step (transformerop/cuda_early.py); the head's g^T x form is the head's warm-up's."""
    g = torch.zeros(16, C, device=device)
    idx = torch.zeros(16, dtype=torch.int64, device=device)
    return [lambda: tn(None, g, idx=idx, R=65)]
