"""decode=persistent's MLP phase on its own, on a grid of several programs under the Triton
interpreter (the whole kernel runs on one program there, its barriers passing at once; the MLP
phase has no barrier inside, so its programs can run one after another): each program's hidden
units -- tiles of BN rows, or of fewer (SPAN_FC, masked) -- and their shares added into the next
slot must give x + MLP(LN(x)) once, against a float64 reference -- with the slot in REPS copies
that the programs add into by turns (program % REPS), their sum."""
import itertools

import pytest
import torch

from transformerop.decode.persistent_plan import COPY, SLOT

# the phase as the kernel calls it: the first tile's weights loaded before the phase (as at the
# barrier), then _mlp; B_P2 is the bias the program folding the slot adds with it
SCRIPT = '''
import json, sys
import torch
import triton
import triton.language as tl
from kernels.triton_decode_mlp import _mlp
from kernels.triton_decode_phases import _tile_rows, _weights
from transformerop.decode.restack import pack_chunks


@triton.jit
def mlp_alone(X, XM, B_P2, XS, W_FC, B_FC, U, W_P2T, LN_W, LN_B, eps, NB: tl.constexpr, C: tl.constexpr,
              B_PAD: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, BC: tl.constexpr, ONE: tl.constexpr,
              AHEAD: tl.constexpr, FOLD: tl.constexpr, DOT: tl.constexpr, STAGES: tl.constexpr,
              SPAN: tl.constexpr, PRE: tl.constexpr, REPS: tl.constexpr, PACKED: tl.constexpr):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    first, end = _tile_rows(pid, 4 * C, 4 * C, SPAN)
    w = _weights(W_FC, first, end, 0, C, C, BN, BK, ONE or AHEAD or PRE, PACKED)
    w2 = _weights(W_P2T, first, end, 0, C, C, BN, BC, ONE or PRE, PACKED)
    _mlp(pid, nprog, w, w2, X, XM, B_P2, XS, W_FC, B_FC, U, W_P2T, LN_W, LN_B, eps, NB, C, B_PAD, BN, BK, BC, ONE,
         AHEAD, FOLD, False, True, True, DOT, "ieee", STAGES, SPAN, PRE, PRE, REPS, PACKED)


torch.manual_seed(0)
C, NB, eps = 48, 3, 1e-5
x = torch.randn(NB, C) * 2 + 0.5
g, beta = 1 + 0.1 * torch.randn(C), 0.1 * torch.randn(C)
w_fc, b_fc = torch.randn(4 * C, C) / C ** 0.5, 0.1 * torch.randn(4 * C)
w_p2, b_p2 = torch.randn(C, 4 * C) / (4 * C) ** 0.5, 0.1 * torch.randn(C)
d = {k: v.double() for k, v in dict(x=x, g=g, beta=beta, w_fc=w_fc, b_fc=b_fc, w_p2=w_p2, b_p2=b_p2).items()}
xn = (d["x"] - d["x"].mean(1, keepdim=True)) / (d["x"].var(1, unbiased=False, keepdim=True) + eps).sqrt()
h = (xn * d["g"] + d["beta"]) @ d["w_fc"].T + d["b_fc"]
h = 0.5 * h * (1 + torch.erf(h / 2 ** 0.5))
want = d["x"] + h @ d["w_p2"].T + d["b_p2"]
u = torch.cat([d["w_fc"] @ d["g"], d["w_fc"] @ d["beta"] + d["b_fc"]]).float()  # FOLD's u and c
errors, copies = {}, {}
for name, programs, bn, bk, one, ahead, fold, dot, span, reps, *flags in json.loads(sys.argv[1]):
    packed = "packed" in flags
    w_fc_k, w_p2t_k = (pack_chunks(w, bn, bk) if packed else w for w in (w_fc, w_p2.T.contiguous()))
    xm = torch.zeros(reps, NB, C)
    xs = torch.zeros(programs, NB, C)
    b_pad = max(16, triton.next_power_of_2(NB)) if dot else triton.next_power_of_2(NB)
    mlp_alone[(programs,)](x, xm, b_p2, xs, w_fc_k, b_fc, u, w_p2t_k, g, beta, eps, NB, C, b_pad, bn, bk,
                           bk, one, ahead, fold, dot, 2, span, "pre" in flags, reps, packed)
    errors[name] = (xm.double().sum(0) - want).abs().max().item()
    copies[name] = int((xm.abs().sum((1, 2)) > 0).sum())  # copies something was added into
print("RESULT " + json.dumps({"errors": errors, "copies": copies}))
'''

# (name, programs, BN, BK, ONE, AHEAD, FOLD, DOT, SPAN, REPS[, "pre"][, "packed"]); 4C = 192 hidden units
CASES = [
    # 5 programs, tiles of 39 rows in 64 (the last 36): one a program, in chunks of 16
    *[(f"span_{form}_{'dot' if dot else 'fma'}", 5, 64, 16, False, not dot, fold, dot, 39, 1)
      for (form, fold), dot in itertools.product((("ln_first", 0), ("copy", COPY), ("slot", SLOT)), (False, True))],
    ("span_one_tile", 5, 64, 64, True, False, 0, False, 39, 1),  # one tile of one chunk, loaded ahead (ONE)
    ("spans_two_a_program", 5, 32, 16, False, True, COPY, False, 20, 1),  # 10 tiles of 20: two a program
    ("spans_past_the_units", 7, 32, 16, False, False, SLOT, True, 28, 1),  # 7 tiles, the last of 24
    ("more_programs_than_tiles", 200, 16, 32, False, False, 0, True, 1, 1),  # a row a tile, 8 programs idle
    ("whole_tiles", 5, 32, 16, False, True, COPY, False, 32, 1),  # 6 tiles of 32 on 5 programs: program 0 has two
    ("whole_tiles_dot", 5, 32, 16, False, False, SLOT, True, 32, 1),
    # PRE: each tile's first chunk of W_fc and of W_P2T before the pipelined loops, the program's
    # first tile's loaded ahead; program 0 has two tiles (its second loads its own first chunks)
    ("pre_first_chunks", 5, 32, 16, False, False, COPY, True, 32, 1, "pre"),
    ("pre_spans", 5, 64, 16, False, False, SLOT, True, 39, 1, "pre"),
    ("pre_fma", 5, 32, 16, False, False, 0, False, 32, 1, "pre"),
    # the slot in copies: 5 programs over 4 (program 4 adds into copy 0 again), 7 over 3
    ("copies_4_fma", 5, 32, 16, False, True, COPY, False, 20, 4),
    ("copies_3_dot", 7, 32, 16, False, False, SLOT, True, 28, 3),
    # W_fc and W_P2T stored chunk by chunk (pack_chunks): every chunk read as one run, in each loop's form
    ("packed_dot", 5, 32, 16, False, False, SLOT, True, 32, 1, "packed"),
    ("packed_ahead_fma", 5, 32, 16, False, True, COPY, False, 32, 1, "packed"),
    ("packed_pre", 5, 32, 16, False, False, COPY, True, 32, 1, "pre", "packed"),
    ("packed_plain_fma", 7, 16, 16, False, False, 0, False, 16, 1, "packed"),
]


@pytest.fixture(scope="module")
def errors(tmp_path_factory):
    import json

    from conftest import script_result
    return script_result(SCRIPT, {"TRITON_INTERPRET": "1"}, json.dumps(CASES), folder=tmp_path_factory.mktemp("mlp"))


@pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter's run: CPU only")
@pytest.mark.parametrize("case", [c[0] for c in CASES])
def test_every_unit_is_added_once(errors, case):
    # a unit lost or added twice moves the slot by ~0.1-1; fp32 sums of 48 and 192 terms by ~1e-6
    assert errors["errors"][case] < 1e-4, errors
    # the copies cases give every program a tile: their shares must reach every copy
    programs, reps = next((c[1], c[9]) for c in CASES if c[0] == case)
    assert errors["copies"][case] == min(programs, reps), errors["copies"]
