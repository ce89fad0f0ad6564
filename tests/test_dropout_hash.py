"""The dropout decisions of kernels/triton_dropout.py (attention and the fused norm use them):

- exact: a Triton kernel under TRITON_INTERPRET=1 evaluates row_keys + kept over 4,096 rows x
  256 columns, and every decision equals the formula written below in NumPy (uint64 arithmetic
  masked to 32 bits), at two seeds and two rates;
- random enough: the keep rate; neighbours at distances 1 to 128 along rows and along columns
  (both kept with probability (1-p)^2); the 16 patterns of 2 x 2 blocks (chi-square, 15 degrees of
  freedom); the spread of row and column counts against the binomial's;
- the checks can fail: a planted weak mix (the row key xor the column's, no multiply) fails them.

The decisions are deterministic, so these statistics are fixed numbers, not flaky draws."""
import numpy as np
import pytest
from conftest import script_result

KERNEL = r'''
import json, sys
import numpy as np
import torch
import triton
import triton.language as tl
from kernels.triton_dropout import kept, row_keys, threshold


@triton.jit
def decisions(OUT, SEED, ROW0, drop_thr, C: tl.constexpr, BR: tl.constexpr):
    local = tl.program_id(0) * BR + tl.arange(0, BR)
    cols = tl.arange(0, C)
    keys = row_keys(tl.load(SEED), ROW0 + local.to(tl.int64), True)
    tl.store(OUT + local[:, None] * C + cols[None, :], kept(keys[:, None], cols[None, :], drop_thr).to(tl.int8))


R, C = int(sys.argv[1]), int(sys.argv[2])
out = {}
for seed, row0, p in ((1234, 0, 0.2), (2 ** 40 + 77, 3 * 2 ** 33 + 5, 0.5)):
    mask = torch.empty(R, C, dtype=torch.int8)
    decisions[(R // 256,)](mask, torch.tensor([seed]), row0, threshold(p), C=C, BR=256)
    out[f"{seed},{row0},{p}"] = np.packbits(mask.numpy().astype(bool)).tobytes().hex()
print("RESULT " + json.dumps(out))
'''

M32 = np.uint64(0xFFFFFFFF)


def _u32(x):
    return np.asarray(x, dtype=np.uint64) & M32


def _fmix(x):
    """murmur3's 32-bit finalizer."""
    x = _u32(x)
    x ^= x >> np.uint64(16)
    x = _u32(x * np.uint64(0x85EBCA6B))
    x ^= x >> np.uint64(13)
    x = _u32(x * np.uint64(0xC2B2AE35))
    return x ^ (x >> np.uint64(16))


def _row_keys(seed, rows):
    rows, seed = np.asarray(rows, dtype=np.uint64), np.uint64(seed)
    k = _fmix(_u32(rows) ^ _u32(seed))
    return _fmix(k ^ (rows >> np.uint64(32)) ^ (seed >> np.uint64(32)))


def _column_mix(rk, cols):
    return rk[:, None] ^ _u32(np.asarray(cols, dtype=np.uint64) * np.uint64(0x9E3779B9))[None, :]


def formula(seed, row0, rows, cols, p):
    """keep(row, col): h = ((row key ^ col * golden) * M1, then ^= h >> 15, then * M2) mod 2^32;
    kept iff h >= round(p * 2^24) * 2^8."""
    h = _u32(_column_mix(_row_keys(seed, row0 + np.arange(rows)), np.arange(cols)) * np.uint64(0x85EBCA6B))
    h ^= h >> np.uint64(15)
    h = _u32(h * np.uint64(0xC2B2AE35))
    return h >= np.uint64(int(round(p * 2 ** 24)) << 8)


def weak(seed, row0, rows, cols, p):
    """The planted fault: no multiply after the xor, so decisions inherit the xor's structure."""
    h = _column_mix(_row_keys(seed, row0 + np.arange(rows)), np.arange(cols))
    return h >= np.uint64(int(round(p * 2 ** 24)) << 8)


def unpack(bits_hex: str, rows: int, cols: int) -> np.ndarray:
    """A (rows, cols) bool mask from the hex of np.packbits of its row-major bytes (how the
    subprocess scripts hand a kernel's decisions back)."""
    bits = np.unpackbits(np.frombuffer(bytes.fromhex(bits_hex), np.uint8))
    return bits[:rows * cols].reshape(rows, cols).astype(bool)


def independence(mask: np.ndarray, p: float) -> dict:
    """z-scores (|z| large = not independent draws of rate 1 - p) and a 2 x 2 pattern chi-square."""
    k = mask.astype(np.float64)
    q = 1.0 - p
    R, C = k.shape
    rate_z = (k.mean() - q) / np.sqrt(p * q / k.size)
    lag_z = 0.0
    for lag in (1, 2, 3, 4, 8, 16, 32, 64, 128):
        for a, b in ((k[lag:], k[:-lag]), (k[:, lag:], k[:, :-lag])):
            both = (a * b).mean()
            lag_z = max(lag_z, abs(both - q * q) / np.sqrt(q * q * (1 - q * q) / a.size))
    kk = mask.astype(np.int64)
    pattern = (kk[0:-1:2, 0:-1:2] + 2 * kk[1::2, 0:-1:2] + 4 * kk[0:-1:2, 1::2] + 8 * kk[1::2, 1::2]).ravel()
    ones = np.array([bin(i).count("1") for i in range(16)])
    expected = pattern.size * q ** ones * p ** (4 - ones)
    chi2 = (((np.bincount(pattern, minlength=16) - expected) ** 2) / expected).sum()
    # row and column counts: variance against the binomial's, as a z of the ratio
    row_z = (k.sum(1).var() / (C * p * q) - 1) * np.sqrt((R - 1) / 2)
    col_z = (k.sum(0).var() / (R * p * q) - 1) * np.sqrt((C - 1) / 2)
    return dict(rate_z=abs(rate_z), lag_z=lag_z, chi2=chi2, row_z=abs(row_z), col_z=abs(col_z))


def passes(s: dict) -> bool:
    # chi-square with 15 degrees of freedom: 40 is exceeded with probability ~5e-4
    return s["rate_z"] < 5 and s["lag_z"] < 5 and s["chi2"] < 40 and s["row_z"] < 5 and s["col_z"] < 5


@pytest.fixture(scope="module")
def kernel_masks(tmp_path_factory):
    out = script_result(KERNEL, {"TRITON_INTERPRET": "1"}, "4096", "256",
                        folder=tmp_path_factory.mktemp("dropout_hash"), timeout=600)
    return {tuple(k.split(",")): unpack(v, 4096, 256) for k, v in out.items()}


def test_kernel_decisions_equal_the_formula(kernel_masks):
    for (seed, row0, p), mask in kernel_masks.items():
        want = formula(int(seed), int(row0), 4096, 256, float(p))
        assert np.array_equal(mask, want), (seed, row0, p, int((mask != want).sum()))


def test_kernel_decisions_look_independent(kernel_masks):
    for (seed, row0, p), mask in kernel_masks.items():
        s = independence(mask, float(p))
        assert passes(s), (seed, row0, p, s)


@pytest.mark.parametrize("p", [0.2, 0.5])
def test_a_weak_mix_fails_the_same_checks(p):
    s = independence(weak(1234, 0, 4096, 256, p), p)
    assert not passes(s), s
    assert passes(independence(formula(1234, 0, 4096, 256, p), p))
