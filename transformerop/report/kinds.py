"""What a profiled kernel is, from its name, for a profile told by kind in the report: where a
step's time goes at a glance. Torch-free, as the rest of the report."""
import re

# a kernel is of the first kind whose pattern its name matches (torch's, cuBLAS's, cuDNN's and
# this project's names; 100 characters of them: measure/profiler.py keeps that many)
KINDS = (
    ("optimizer", re.compile(r"multi_tensor_apply|FusedOptim|adam|NormTwo|lpnorm", re.I)),  # AdamW, the grad clip
    ("random", re.compile(r"distribution_", re.I)),  # torch's random draws (the dropout seeds)
    ("attention", re.compile(r"sdpa|flash|fmha|attention|attn|_fwd_kernel|_bwd_kernel|compute_dot_do_o|convert_dq|"
                             r"philox", re.I)),
    ("matmul", re.compile(r"gemm|nvjet|cutlass|splitKreduce|xmma|cublas|_matmul", re.I)),
    ("norm", re.compile(r"norm|GammaBeta", re.I)),
    ("loss", re.compile(r"nll_loss|softmax|cross_entropy", re.I)),
    ("embedding", re.compile(r"embedding|grad_weight|radix_sort|unique_by_key|segment|gather|index|cub::", re.I)),
    ("copy", re.compile(r"copy|Cat|Memcpy", re.I)),  # casts too (autocast's weight casts, their grads')
    ("reduction", re.compile(r"reduce", re.I)),
    ("memset", re.compile(r"Memset|FillFunctor", re.I)),
    ("elementwise", re.compile(r"elementwise|Gelu|Functor", re.I)),
)


def kind(name: str) -> str:
    """The KINDS entry a kernel's name falls under ("other" for none)."""
    return next((k for k, pattern in KINDS if pattern.search(name)), "other")


def by_kind(table: list) -> list:
    """A kernel table's [name, us, launches, ...] rows summed by kind: [kind, us, launches], most
    time first."""
    sums = {}
    for name, us, launches, *_ in table:
        k = sums.setdefault(kind(name), [0.0, 0.0])
        k[0] += us
        k[1] += launches
    return sorted(([k, us, n] for k, (us, n) in sums.items()), key=lambda r: -r[1])
