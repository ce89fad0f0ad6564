"""kernels/triton_tuned.py: the tuned configs shipped with the code.

CPU: the table's exact contents after a merge (other sections and keys kept), and the attention
under the Triton interpreter launching a shipped config -- not the autotuner's -- for its device's
section only, with outputs equal to float64. GPU: the committed table's sm_90 rows launch at once
(no autotuning) and match float64.
"""
import json
import subprocess
import sys

import pytest
import torch
from conftest import ROOT, script_result

KEY = ("fwd", torch.device("cpu"), torch.bfloat16, 256, 256, 512, 64, True, "tf32", True)


def test_record_merges_and_writes_the_exact_table(tmp_path):
    from kernels import triton_tuned
    path = tmp_path / "tuned.json"
    path.write_text(json.dumps({"sm_90": {"bwd|bfloat16|1|1|1|64|True|tf32|False": {"BLOCK_M": 16}},
                                "cpu": {"fwd|bfloat16|256|256|512|64|True|tf32|True": {"BLOCK_M": 1}}}))
    written = triton_tuned.record({KEY: {"BLOCK_M": 64, "BLOCK_N": 32, "num_warps": 4, "num_stages": 3, "x": 9}}, path)
    row = {"BLOCK_M": 64, "BLOCK_N": 32, "num_warps": 4, "num_stages": 3, "gpu": "cpu"}
    assert written == {"cpu": {"fwd|bfloat16|256|256|512|64|True|tf32|True": row}}
    assert path.read_text() == (
        '{\n "cpu": {\n  "fwd|bfloat16|256|256|512|64|True|tf32|True": {\n   "BLOCK_M": 64,\n   "BLOCK_N": 32,\n'
        '   "num_warps": 4,\n   "num_stages": 3,\n   "gpu": "cpu"\n  }\n },\n "sm_90": {\n'
        '  "bwd|bfloat16|1|1|1|64|True|tf32|False": {\n   "BLOCK_M": 16\n  }\n }\n}\n')
    assert triton_tuned.lookup(KEY, path) == {k: row[k] for k in triton_tuned.CONFIG_FIELDS}
    assert triton_tuned.lookup(KEY[:2] + (torch.float32,) + KEY[3:], path) is None  # another dtype: tuned
    assert not (tmp_path / "tuned.json.tmp").exists()


def test_the_committed_table_is_well_formed():
    from kernels import triton_tuned
    table = json.loads(triton_tuned.TABLE.read_text())
    for section, rows in table.items():
        assert section.startswith("sm_"), section
        for name, row in rows.items():
            kernel, dtype, *ints, causal, prec, dropout = name.split("|")
            assert kernel in ("fwd", "bwd", "bwd_atomic") and hasattr(torch, dtype) and prec in ("tf32", "ieee")
            assert all(int(i) & (int(i) - 1) == 0 for i in ints[:3]) and causal in ("True", "False"), name
            assert set(row) == {*triton_tuned.CONFIG_FIELDS, "gpu"} and row["gpu"], row


SHIPPED = r"""
import json, sys, torch
from kernels import triton_attention as ta, triton_launch, triton_tuned
triton_tuned.TABLE = triton_tuned.Path(sys.argv[1])
torch.manual_seed(0)
q, k, v = (torch.randn(1, 2, 40, 16) for _ in range(3))
out = ta.attention(q, k, v)
s = (q.double() @ k.double().transpose(-1, -2)) / 4.0
s = s.masked_fill(torch.ones(40, 40, dtype=torch.bool).triu(1), float("-inf"))
ref = torch.softmax(s, -1) @ v.double()
print("RESULT " + json.dumps({"err": (out.double() - ref).abs().max().item(), "stats": triton_launch.stats,
                              "last": triton_launch.last_launch[0]}))
"""


@pytest.mark.parametrize("section", ["cpu", "sm_90"])
def test_the_attention_launches_the_shipped_config_of_its_own_section(tmp_path, section):
    cfg = {"BLOCK_M": 16, "BLOCK_N": 16, "num_warps": 2, "num_stages": 1}  # not the interpreter's one config (32, 16)
    path = tmp_path / "tuned.json"
    path.write_text(json.dumps({section: {"fwd|float32|64|64|2|16|True|tf32|False": {**cfg, "gpu": "test"}}}))
    r = script_result(SHIPPED, {"TRITON_INTERPRET": "1"}, str(path))
    assert r["err"] < 1e-5, r
    if section == "cpu":
        assert r["stats"]["shipped"] == 1 and r["stats"]["tuned"] == 0 and r["last"] == cfg, r
    else:  # another architecture's row: the autotuner picks
        assert r["stats"]["shipped"] == 0 and r["stats"]["tuned"] == 1 and r["last"] is None, r


def test_tuning_refuses_a_bad_shape_in_one_line():
    p = subprocess.run([sys.executable, "-m", "kernels.tune_attention", "64,6,256"], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 2 and "shape '64,6,256': give B,H,T,D as four positive integers" in p.stderr, p.stderr


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_shipped_rows_launch_without_tuning_and_match_float64():
    from kernels import triton_attention as ta
    from kernels import triton_launch, triton_tuned
    arch = triton_tuned.arch(torch.device("cuda"))
    rows = json.loads(triton_tuned.TABLE.read_text()).get(arch, {})
    fwd = [n for n in rows if n.startswith("fwd|bfloat16|") and n.endswith("|64|True|tf32|False")]
    if not fwd:
        pytest.skip(f"no bf16 causal forward rows for {arch}")
    tq, tk, bh = (int(x) for x in fwd[0].split("|")[2:5])
    torch.manual_seed(0)
    B, H = bh, 1  # B*H in the row's bucket
    q, k, v = (torch.randn(B, H, tq, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    before = dict(triton_launch.stats)
    out = ta.attention(q, k, v)
    assert triton_launch.stats["shipped"] == before["shipped"] + 1 and triton_launch.stats["tuned"] == before["tuned"]
    s = (q.double() @ k.double().transpose(-1, -2)) / 8.0
    s = s.masked_fill(torch.ones(tq, tk, dtype=torch.bool, device="cuda").triu(1 + tk - tq), float("-inf"))
    ref = torch.softmax(s, -1) @ v.double()
    assert (out.double() - ref).abs().max() < 2e-2


def test_a_warm_up_launch_skips_a_key_that_would_need_tuning():
    """triton_launch.shipped_only (the attention's warm-ups): an autotuned kernel with several
    candidates and no config for its key is not launched (its timings would run beside other
    warm-ups); one with a config, or a single candidate, is; outside, every launch runs."""
    from kernels import triton_launch

    class Tuned:  # stands in for a triton.autotune'd kernel: its candidates and its launches
        def __init__(self, n):
            self.configs, self.calls = [object()] * n, 0

        def __getitem__(self, grid):
            def run(*args, **kw):
                self.calls += 1
            return run

    key = ("fwd", torch.device("cpu"), torch.float32, 3, 3, 3, 3, True, "ieee", False)  # in no table
    several, one = Tuned(2), Tuned(1)
    with triton_launch.shipped_only():
        triton_launch.launch(several, lambda c: (1, 1), key, None, (), {})
        triton_launch.launch(one, lambda c: (1, 1), key, None, (), {})
    assert (several.calls, one.calls) == (0, 1)
    triton_launch.launch(several, lambda c: (1, 1), key, None, (), {})
    assert several.calls == 1
