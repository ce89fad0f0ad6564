"""Fused attention dropout for kernels/triton_attention.py: the keep/drop decision of score
element (row, key) is a hash of (seed, row, key), so the backward regenerates the forward's
mask and nothing T x T is stored. row = (b*H + h)*Tq + query. The seed is a 1-element device
tensor drawn from torch's RNG, so a CUDA-graphed step gets a new mask on every replay.

Why a hash, not Philox (tl.rand): on the H200, Philox's 10 rounds per element made the fused
forward 4x and the backward 2.5x slower inside the train step. Each row's key gets murmur3's
full finalizer twice (once a row); each element only a short mix of that key and its column
(kept). tests/test_dropout_hash.py checks the decisions against a formula written there, their
rate, their independence (neighbours at several distances, 2 x 2 patterns, row and column
counts) and that a weaker mix fails the same checks.
"""
import torch
import triton
import triton.language as tl


@triton.jit
def load_seed(SEED, DROPOUT: tl.constexpr):
    if DROPOUT:
        return tl.load(SEED)
    else:
        return 0


@triton.jit
def mix(x):
    """murmur3's 32-bit finalizer: each input bit flips each output bit with probability ~1/2."""
    x ^= x >> 16
    x *= 0x85EBCA6B
    x ^= x >> 13
    x *= 0xC2B2AE35
    x ^= x >> 16
    return x


@triton.jit
def row_keys(seed, rows, DROPOUT: tl.constexpr):
    """Per score row ((b*H + h)*Tq + query, int64) a 32-bit key mixed from it and the seed."""
    if DROPOUT:
        k = mix(rows.to(tl.uint32) ^ seed.to(tl.uint32))
        return mix(k ^ (rows >> 32).to(tl.uint32) ^ (seed >> 32).to(tl.uint32))
    else:
        return rows


@triton.jit
def kept(rkeys, keys, drop_thr):
    """Dropout's keep decision for (row key, key index), broadcast: the row key (already mixed)
    xor the key index times the golden ratio, then two multiplies with a xorshift between them,
    six integer operations an element where the full finalizer after the xor took eleven. The
    attention backward makes every decision twice (its dK/dV and its dQ programs), so these
    operations weighed: at the train step's shape on an H100 dropout 0.2 took the backward from
    79.8 to 99.7 us with the full finalizer, to 90.9 us with this mix, and the step 2.2% less time
    (experiments/results/h100-2026-12-07e). The product's top 24 bits against p * 2^24, compared
    as h >= thr * 2^8: no shift an element."""
    h = (rkeys ^ (keys.to(tl.uint32) * 0x9E3779B9)) * 0x85EBCA6B
    h ^= h >> 15
    h *= 0xC2B2AE35
    return h >= (drop_thr << 8).to(tl.uint32)


def threshold(p_drop):
    return int(round(p_drop * 2 ** 24))  # dropped when a hash's top 24 bits fall below it


def seed_tensor(seed, device):
    """Dropout's seed as a 1-element device tensor: drawn from torch's RNG on `device`
    (graph-safe: a captured step draws a new one per replay) unless given (tests)."""
    if seed is None:
        return torch.randint(0, 2 ** 62, (1,), device=device)
    return torch.tensor([int(seed)], dtype=torch.int64, device=device)
