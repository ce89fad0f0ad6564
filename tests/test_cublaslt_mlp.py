"""model.gelu and model.cublaslt_mlp (kernels/cublaslt_mlp.py and .cpp).

CPU: the tanh GELU's MLP against the formula written out in float64 (the erf form must miss it),
the refusals (one line before a run dir exists), decode paths whose kernels compute the erf GELU
refuse a tanh model, the C library compiles without torch's headers and exports what the Python
side binds, and its build is keyed by its source. GPU (`pytest -m gpu`): the MLP's output and its three gradients against the
float64 formula at the seed shape and an odd one, the epilogue's plan cached across a CUDA-graph
replay, and a graphed bf16 step that trains like the eager tanh MLP with one GELU kernel fewer
each way a layer.
"""
import math
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from kernels import cuda_build

SOURCE = cuda_build.KERNEL_DIR / "cublaslt_mlp.cpp"
S2PI, A = math.sqrt(2.0 / math.pi), 0.044715


def gelu_tanh64(h):
    return 0.5 * h * (1.0 + torch.tanh(S2PI * (h + A * h ** 3)))


def dgelu_tanh64(h):
    t = torch.tanh(S2PI * (h + A * h ** 3))
    return 0.5 * (1.0 + t) + 0.5 * h * (1.0 - t * t) * S2PI * (1.0 + 3.0 * A * h * h)


def mlp64(x, w1, w2, dy):
    """y = GELU_tanh(x w1^T) w2^T and its gradients for dy, by the chain rule written out in float64."""
    x, w1, w2, dy = (t.double().reshape(-1, t.shape[-1]) for t in (x, w1, w2, dy))
    h = x @ w1.t()
    y = gelu_tanh64(h) @ w2.t()
    dh = (dy @ w2) * dgelu_tanh64(h)
    return y, dh @ w1, dh.t() @ x, dy.t() @ gelu_tanh64(h)


@pytest.mark.parametrize("gelu", ["tanh", "erf"])
def test_the_tanh_mlp_is_the_formula_and_the_erf_one_is_not(gelu):
    from transformerop.model.gpt import MLP
    torch.manual_seed(0)
    mlp = MLP(OmegaConf.create(dict(n_embd=16, bias=False, dropout=0.0, gelu=gelu))).double()
    x = torch.randn(5, 7, 16, dtype=torch.float64, requires_grad=True)
    dy = torch.randn(5, 7, 16, dtype=torch.float64)
    y = mlp(x)
    y.backward(dy)
    ref = mlp64(x.detach() * 3, mlp.c_fc.weight.detach(), mlp.c_proj.weight.detach(), dy)  # wide enough to tell the two
    y3 = mlp(x.detach() * 3)
    err = (y3.reshape(-1, 16) - ref[0]).abs().max().item()
    if gelu == "tanh":
        assert err < 1e-12, err
        _, dx, dw1, dw2 = mlp64(x.detach(), mlp.c_fc.weight.detach(), mlp.c_proj.weight.detach(), dy)
        assert (x.grad.reshape(-1, 16) - dx).abs().max() < 1e-12
        assert (mlp.c_fc.weight.grad - dw1).abs().max() < 1e-12 and (mlp.c_proj.weight.grad - dw2).abs().max() < 1e-12
    else:  # the exact GELU differs from the tanh form by up to ~5e-4 an activation: the check must see it
        assert err > 1e-6, err


def test_refused_in_one_line_before_any_work(tmp_path):
    from conftest import refused_before_any_work
    base = ("model=gpt_addition", "model.cublaslt_mlp=true")
    cases = {
        (*base, "model.bias=false", "train.dtype=bfloat16"): "needs model.gelu=tanh",
        (*base, "model.gelu=tanh", "model.bias=true", "train.dtype=bfloat16"): "needs model.bias=false",
        (*base, "model.gelu=tanh", "model.bias=false", "train.dtype=float32"): "needs train.dtype=bfloat16",
        ("model=gpt_addition", "model.gelu=tanh", "model.fused_mlp=true"): "model.fused_mlp=true computes the erf GELU",
        ("model=gpt_addition", "model.gelu=tanh", "task=generate", "decode=fused"): "decode=fused computes the erf GELU",
        ("model=gpt_addition", "model.gelu=tanh", "task=generate", "decode=persistent"): "model.gelu=tanh: use model.gelu=erf",
    }
    for args, needle in cases.items():
        line = refused_before_any_work(tmp_path, *args).strip().splitlines()[-1]
        assert needle in line, (args, line)


def test_takes_the_epilogues_only_where_the_matmuls_run_in_bf16():
    """A float32 forward outside autocast (the prefill of the sample after training) must take the
    eager tanh MLP: the extension takes bf16 only."""
    from kernels.cublaslt_mlp import runs_in_bf16
    x = torch.randn(2, 8)
    assert not runs_in_bf16(x)
    assert runs_in_bf16(x.bfloat16())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert runs_in_bf16(x)
    with torch.autocast("cpu", dtype=torch.float16):
        assert not runs_in_bf16(x) and not runs_in_bf16(x.bfloat16())


def test_needs_cuda_in_one_line():
    from kernels import cublaslt_mlp
    from transformerop.model.attention import BackendUnavailable
    if torch.cuda.is_available():
        pytest.skip("a GPU is here")
    with pytest.raises(BackendUnavailable, match=r"model.cublaslt_mlp=true .* needs a CUDA GPU"):
        cublaslt_mlp.require()


def test_build_is_keyed_by_its_source():
    from kernels import cublaslt_mlp as lt
    name = cuda_build.extension_name("90", lt.EXTENSION)
    assert name.startswith("tfo_cublaslt_mlp_sm90_")
    edited = cuda_build.Extension(lt.EXTENSION.prefix, lt.EXTENSION.what,
                                  lambda: ([SOURCE.read_text() + "\n// edited\n"], []), lt.EXTENSION.functions)
    assert cuda_build.extension_name("90", edited) != name
    assert not lt.EXTENSION.needs_nvcc  # C++ on cuBLASLt: a host compiler, CUDA's and cuBLASLt's headers


def _cublaslt_include():
    from torch.utils.cpp_extension import CUDA_HOME

    from kernels.cublaslt_mlp import _cublaslt
    includes, _ = _cublaslt()
    for d in [*includes, f"{CUDA_HOME or '/usr/local/cuda'}/include"]:
        if (Path(d) / "cublasLt.h").exists():
            return d
    return None


def _cuda_include():
    from torch.utils.cpp_extension import CUDA_HOME
    d = Path(CUDA_HOME or "/usr/local/cuda") / "include"
    return str(d) if (d / "cuda_runtime_api.h").exists() else None


@pytest.fixture(scope="module")
def c_library(tmp_path_factory):
    """The C library as g++ builds it from its source with CUDA's and cuBLASLt's headers alone (no
    torch include path), linked to the CUDA runtime and cuBLASLt where both are found."""
    if None in (shutil.which("g++"), shutil.which("nm"), _cublaslt_include(), _cuda_include()):
        pytest.skip("needs g++, nm, CUDA's runtime header and cuBLASLt's (the CUDA toolkit's or the nvidia-cublas "
                    "wheel's)")
    from kernels.cublaslt_mlp import _cublaslt
    out = tmp_path_factory.mktemp("lt")
    incs = [f"-I{_cuda_include()}", f"-I{_cublaslt_include()}"]
    cmd = ["g++", "-std=c++17", "-c", "-fPIC", "-Werror=return-type", *incs, str(SOURCE), "-o", str(out / "lt.o")]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-4000:]
    cudart = sorted(Path(_cuda_include()).parent.glob("**/libcudart.so*"))
    _, cublaslt_flags = _cublaslt()
    so = out / "lt.so"
    linked = bool(cudart) and subprocess.run(["g++", "-shared", str(out / "lt.o"), "-o", str(so), *cublaslt_flags,
                                              str(cudart[0])], capture_output=True).returncode == 0
    return out / "lt.o", so if linked else None


def test_source_compiles_without_torch_and_exports_what_python_binds(c_library):
    """A torch header slipped into the source fails the compile (its first build would take
    seconds again); its extern "C" functions are exactly those kernels/cublaslt_mlp.py binds."""
    from kernels.cublaslt_mlp import FUNCTIONS
    nm = subprocess.run(["nm", "--defined-only", "-g", str(c_library[0])], capture_output=True, text=True, check=True)
    exported = {line.split()[-1] for line in nm.stdout.splitlines() if line.split()[-1].startswith("tfo_")}
    assert exported == set(FUNCTIONS), exported ^ set(FUNCTIONS)


def test_the_library_loads_and_answers_through_ctypes(c_library):
    """The calls that need no GPU, through the same ctypes bindings as the MLP's: cuBLASLt's
    version, no plans yet, and the status lines the errors carry."""
    import ctypes

    from kernels.cublaslt_mlp import Library
    if c_library[1] is None:
        pytest.skip("the CUDA runtime library was not found to link against")
    lib = Library(ctypes.CDLL(str(c_library[1])))
    assert lib.cublaslt_version() >= 130000  # the nvidia-cublas>=13 the extra asks for
    assert lib.plan_count() == 0 and lib.plans() == []
    assert b"no algorithm" in lib.lib.tfo_lt_status_string(15)  # CUBLAS_STATUS_NOT_SUPPORTED
    assert b"outside CUDA graph capture" in lib.lib.tfo_lt_status_string(-1)


# ---------------------------------------------------------------- GPU (run on the device)
def _rel(a, ref):
    return ((a.double() - ref).abs().max() / ref.abs().max()).item()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("M,C", [(64 * 256, 384), (1000, 64), (3, 128)])
def test_gpu_matches_float64(M, C):
    from kernels.cublaslt_mlp import CublasLtGeluMLP
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(M, C, device="cuda", generator=g).bfloat16().requires_grad_()
    w1 = (torch.randn(4 * C, C, device="cuda", generator=g) / math.sqrt(C)).bfloat16().requires_grad_()
    w2 = (torch.randn(C, 4 * C, device="cuda", generator=g) / math.sqrt(4 * C)).bfloat16().requires_grad_()
    dy = torch.randn(M, C, device="cuda", generator=g).bfloat16()
    y = CublasLtGeluMLP.apply(x, w1, w2)
    y.backward(dy)
    ref = mlp64(x.detach(), w1.detach(), w2.detach(), dy)
    errs = [_rel(t, r) for t, r in zip((y, x.grad, w1.grad, w2.grad), ref)]
    assert max(errs) < 1.5e-2, errs  # bf16 operands and outputs


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_plans_keep_the_fastest_timed_candidate():
    from kernels.cublaslt_mlp import CublasLtGeluMLP, plans
    M, C = 4096, 256
    x = torch.randn(M, C, device="cuda").bfloat16().requires_grad_()
    w1 = (torch.randn(4 * C, C, device="cuda") / 16).bfloat16().requires_grad_()
    w2 = (torch.randn(C, 4 * C, device="cuda") / 32).bfloat16().requires_grad_()
    CublasLtGeluMLP.apply(x, w1, w2).backward(torch.randn(M, C, device="cuda").bfloat16())
    mine = [p for p in plans() if p[1:4] == (4 * C, M, C)]  # (m, n, k) as cuBLASLt sees them
    assert len(mine) == 2, plans()  # GELU_AUX and DGELU at this shape
    for epilogue, *_, rank, candidates, us, us_first in mine:
        assert 0 <= rank < candidates, (epilogue, rank, candidates)
        if candidates > 1:  # timed: the kept one is no slower than the heuristic's first choice
            assert 0 < us <= us_first, (epilogue, us, us_first)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_float32_forward_outside_autocast_is_the_eager_tanh_mlp():
    from transformerop.model.gpt import MLP
    torch.manual_seed(0)
    cfg = dict(n_embd=64, bias=False, dropout=0.0, gelu="tanh")
    lt = MLP(OmegaConf.create(dict(cfg, cublaslt_mlp=True))).cuda()
    x = torch.randn(3, 5, 64, device="cuda")
    ref = mlp64(x, lt.c_fc.weight.detach(), lt.c_proj.weight.detach(), torch.zeros_like(x))[0]
    assert (lt(x).reshape(-1, 64).double() - ref).abs().max() < 1e-4  # float32 (TF32 off by default)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        assert _rel(lt(x).reshape(-1, 64), ref) < 1.5e-2


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_replays_in_a_cuda_graph_without_new_plans():
    from kernels import cublaslt_mlp as lt
    from transformerop.graphs import capture
    x = torch.randn(512, 128, device="cuda").bfloat16()
    w1, w2 = torch.randn(512, 128, device="cuda").bfloat16() / 11, torch.randn(128, 512, device="cuda").bfloat16() / 22
    eager = lt.CublasLtGeluMLP.apply(x, w1, w2)
    plans = lt._ext().plan_count()
    out = {}
    graph = capture(lambda: out.__setitem__("y", lt.CublasLtGeluMLP.apply(x, w1, w2)))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out["y"], eager)
    assert lt._ext().plan_count() == plans


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_graphed_step_trains_like_the_eager_tanh_mlp(tmp_path):
    """One GELU kernel fewer each way a layer in the captured step, and the same training (not bit
    for bit: cuBLASLt's epilogue rounds h and g as the eager pass does, its products differ)."""
    from conftest import lever_kernels_and_losses
    _, counts, losses = lever_kernels_and_losses(tmp_path, "model.cublaslt_mlp", "model.gelu=tanh")
    assert counts[False] - counts[True] >= 2 * 2 - 1, counts  # 2 layers: their GELU forward and backward kernels
    assert abs(losses[True][-20:].mean() - losses[False][-20:].mean()) < 0.05, (losses[True][-20:], losses[False][-20:])
