"""decode.tiles.L2_NEXT's prefetch (kernels/triton_decode_phases.py: _prefetch_l2) asks L2 for a
block of weights one 128-byte line at a time; the PTX instruction itself runs only on a GPU, but
the lines it is given are _line_offsets', which runs under the Triton interpreter: here every
line of the block must be asked for and nothing outside it, against the block's lines counted in
Python, for whole rows, a head's columns, rows of a part line, several rounds, and no rows."""
import json

import pytest
import torch

SCRIPT = '''
import json, sys
import torch
import triton
import triton.language as tl
from kernels.triton_decode_phases import _line_offsets


@triton.jit
def mark_lines(MARK, r0, r_end, c0, c_end, ld, LINES: tl.constexpr, PER_LINE: tl.constexpr):
    per_row = tl.cdiv(c_end - c0, PER_LINE)
    n = (r_end - r0) * per_row
    for l0 in range(0, n, LINES):
        tl.store(MARK + _line_offsets(l0, n, per_row, r0, c0, ld, LINES, PER_LINE), 1)


marked = {}
for name, rows, r0, r_end, c0, c_end, ld, lines, per_line in json.loads(sys.argv[1]):
    mark = torch.zeros(rows * ld, dtype=torch.int32)
    mark_lines[(1,)](mark, r0, r_end, c0, c_end, ld, lines, per_line)
    marked[name] = mark.nonzero().flatten().tolist()
print("RESULT " + json.dumps(marked))
'''

# (name, rows of W, r0, r_end, c0, c_end, ld, LINES, elements a line: 64 for 16-bit weights, 32 for fp32)
CASES = [
    ("whole_rows", 12, 3, 9, 0, 192, 192, 16, 64),  # 6 rows of 3 lines: one round
    ("whole_rows_rounds", 12, 3, 9, 0, 192, 192, 4, 64),  # 18 lines, 4 a round: the last round wraps
    ("head_columns", 10, 2, 7, 64, 128, 192, 8, 64),  # a head's 64 columns: one line a row, strided
    ("part_line", 6, 0, 6, 32, 72, 96, 8, 32),  # 40 fp32 columns: two lines a row, the second partly
    ("no_rows", 8, 8, 8, 0, 64, 64, 8, 64),  # a program past the last tile
]


def lines_of(rows, r0, r_end, c0, c_end, ld, per_line) -> list:
    """Each line of the block W[r0:r_end, c0:c_end] by its first element's offset."""
    return sorted(r * ld + c for r in range(r0, r_end) for c in range(c0, c_end, per_line))


@pytest.fixture(scope="module")
def marked(tmp_path_factory):
    from conftest import script_result
    return script_result(SCRIPT, {"TRITON_INTERPRET": "1"}, json.dumps(CASES), folder=tmp_path_factory.mktemp("lines"))


@pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter's run: CPU only")
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_every_line_of_the_block_and_nothing_else(marked, case):
    name, rows, r0, r_end, c0, c_end, ld, _, per_line = case
    assert marked[name] == lines_of(rows, r0, r_end, c0, c_end, ld, per_line)
