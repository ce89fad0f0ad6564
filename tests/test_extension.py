"""A newcomer adds a variant in one file: in a copy of the repo, one new attention backend and one
new decode path, each one file plus one registry line; validate, bench, generate, a 2-job sweep
and its report then work with them, and no other file of the copy changed. And nowhere outside
a variant's own file, its registry, conf/ and experiments/ does a variant's name appear."""
import hashlib
import json
import re
import shutil
import subprocess
import sys

import pandas as pd
from conftest import ROOT

from transformerop.decode import PATHS
from transformerop.model import BACKENDS

BACKEND = '''"""attention=thin_sdpa: PyTorch's SDPA with its math kernel only (a newcomer's backend)."""
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from .base import CausalSelfAttention, causal_mask


class ThinSDPA(CausalSelfAttention):
    def attend(self, q, k, v, mask):
        if mask is None and q.size(-2) != k.size(-2):
            mask = causal_mask(q.size(-2), k.size(-2), q.device)
        with sdpa_kernel(SDPBackend.MATH):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None and q.size(-2) > 1,
                                                  dropout_p=self.dropout if self.training else 0.0)
'''
PATH = '''"""decode=static_twice: the static cache, every token written twice (a newcomer's decode path)."""
from .static import Static


class StaticTwice(Static):
    def forward_token(self, token):
        logits = super().forward_token(token)
        self.pos -= token.size(1)  # write the same slots again: the cache must come out the same
        return super().forward_token(token)
'''
TOP = {".git", "outputs", "data", ".gpu", ".whl"}  # the repo root's own: data, outputs, git
ANYWHERE = {"__pycache__", "wandb", ".pytest_cache"}


def _ignore(folder, names):
    top = TOP if folder == str(ROOT) else set()
    return [n for n in names if n in top or n in ANYWHERE or n.endswith(".egg-info")]


def _files(root) -> dict:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in root.rglob("*") if p.is_file() and not ANYWHERE & set(p.relative_to(root).parts)}


def _registry_line(path, anchor_dict: str, line: str) -> None:
    text = path.read_text()
    start = text.index(anchor_dict)
    end = text.index("}", start)
    path.write_text(text[:end] + line + text[end:])


def test_a_backend_and_a_decode_path_in_one_file_each(tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(ROOT, repo, ignore=_ignore)
    before = _files(repo)
    (repo / "transformerop/model/attention/thin_sdpa.py").write_text(BACKEND)
    (repo / "transformerop/decode/static_twice.py").write_text(PATH)
    _registry_line(repo / "transformerop/model/attention/__init__.py", "BACKENDS = {",
                   '    "thin_sdpa": "transformerop.model.attention.thin_sdpa:ThinSDPA",\n')
    _registry_line(repo / "transformerop/decode/registry.py", "PATHS = {",
                   '    "static_twice": "transformerop.decode.static_twice:StaticTwice",\n')

    def run(*args):
        p = subprocess.run([sys.executable, "run.py", *args, "logger=none"], cwd=repo, capture_output=True,
                           text=True, timeout=900, env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin",
                                                        "HOME": str(tmp_path)})
        assert p.returncode == 0, (args, p.stdout[-2000:], p.stderr[-3000:])
        return p

    small = ["model=gpt", "model.n_layer=1", "model.n_head=2", "model.n_embd=32", "model.block_size=16",
             "train.batch_size=2", "bench.warmup_ms=2", "bench.rep_ms=5"]
    v = run("task=validate", "hydra.run.dir=" + str(tmp_path / "validate"))
    rows = {(r[0], r[1]): r[-1] for r in json.loads((tmp_path / "validate" / "results.json").read_text())
            ["tables"]["validation"]["rows"]}
    assert rows[("thin_sdpa", "float32")] == rows[("thin_sdpa", "bfloat16")] == "pass", v.stdout[-2000:]
    assert rows[("decode=static_twice", "float32")] == "pass"
    run("task=bench", "bench.target=attention", "attention=thin_sdpa", *small, f"hydra.run.dir={tmp_path / 'bench'}")
    run("task=generate", "decode=static_twice", "attention=thin_sdpa", "train.max_iters=5", "train.eval_interval=5",
        "train.eval_iters=1", "generate.tokens=20", "generate.repeats=2", "data.n_test=50",
        f"hydra.run.dir={tmp_path / 'generate'}")
    sweep = tmp_path / "sweep"
    run("-m", "task=bench", "bench.target=forward", "attention=sdpa,thin_sdpa", "study.baseline='attention=sdpa'",
        "study.name=thin", *small, f"hydra.sweep.dir={sweep}")
    subprocess.run([sys.executable, "-m", "transformerop.report", str(sweep), "--no-wandb"], cwd=repo, check=True,
                   capture_output=True, timeout=300)
    df = pd.read_csv(sweep / "report.csv")
    assert list(df["attention"]) == ["sdpa", "thin_sdpa"] and df["x_baseline"].notna().all()
    for job in ("bench", "generate"):
        assert json.loads((tmp_path / job / "results.json").read_text())["status"] == "ok"

    after = _files(repo)
    changed = {f for f in before if after.get(f) != before[f]} | (set(after) - set(before))
    assert changed == {"transformerop/model/attention/thin_sdpa.py", "transformerop/decode/static_twice.py",
                       "transformerop/model/attention/__init__.py", "transformerop/decode/registry.py"}, changed


def test_no_variant_name_outside_its_own_file_and_registry():
    """The tool asks a variant's class; it never special-cases a name. (cuda and triton are also
    a device and a package: for them only an option-like use counts.)"""
    own = {n: f"transformerop/model/attention/{p.split(':')[0].rsplit('.', 1)[1]}.py" for n, p in BACKENDS.items()}
    own.update({n: f"transformerop/decode/{p.split(':')[0].rsplit('.', 1)[1]}.py" for n, p in PATHS.items()})
    registries = {"transformerop/model/attention/__init__.py", "transformerop/decode/registry.py"}
    found = []
    for f in sorted([*ROOT.glob("transformerop/**/*.py"), *ROOT.glob("kernels/**/*.py"), ROOT / "run.py"]):
        rel = f.relative_to(ROOT).as_posix()
        text = f.read_text()
        for name, home in own.items():
            if rel in registries or rel == home:
                continue
            pats = [rf"\b(attention|decode)(\.name)?\s*[=:]\s*{name}\b", rf"name\s*==\s*[\"']{name}[\"']"]
            if name not in ("cuda", "triton"):
                pats.append(rf"[\"']{name}[\"']")
            found += [f"{rel}: {name}" for p in pats if re.search(p, text)]
    assert not found, found


def test_no_module_imports_one_that_imports_it_back():
    """Module-level and function-level imports alike, over transformerop/ and kernels/."""
    import ast
    files = [*ROOT.glob("transformerop/**/*.py"), *ROOT.glob("kernels/*.py")]
    mods = {".".join(f.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): f for f in files}

    def targets(cur, node):
        if isinstance(node, ast.ImportFrom):
            base = cur.split(".")[: None if mods[cur].name == "__init__.py" else -1]
            if node.level > 1:
                base = base[: len(base) - (node.level - 1)]
            pkg = ".".join(base + [node.module] if node.module else base) if node.level else node.module or ""
            names = [pkg] + [f"{pkg}.{a.name}" for a in node.names]
        else:
            names = [a.name for a in node.names]
        return {n for n in names if n in mods and n != cur}

    graph = {m: set().union(*[targets(m, n) for n in ast.walk(ast.parse(f.read_text()))
                              if isinstance(n, (ast.Import, ast.ImportFrom))]) for m, f in mods.items()}
    cycles = []

    def walk(start, node, path):
        for nxt in graph[node]:
            if nxt == start:
                cycles.append(path)
            elif nxt not in path:
                walk(start, nxt, path + [nxt])
    for m in graph:
        walk(m, m, [m])
    assert not cycles, cycles[:3]
