"""Build and load our torch extensions through load_inline: the CUDA kernels (kernels/*.cu, one
extension; the torch side lives in BINDING below) and any other `Extension` (the Triton
attention's C++ front, kernels/triton_attention_op.py; the cuBLASLt MLP, a C library that
kernels/cublaslt_mlp.py calls through ctypes).

The .cu files are plain CUDA (launchers on raw pointers). A build is lazy (first `load()`), keyed
by a hash of every source, the build flags, torch's version and the device arch, and cached in
$TORCH_EXTENSIONS_DIR (default ~/.cache/transformerop/torch_extensions), so a second process
imports the cached .so instead of rebuilding. `build_info()` says whether the load was cold
(compiled) or warm and how long it took. Waiting on another process's build: kernels/build_lock.py.
"""
import ctypes
import hashlib
import importlib.util
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from transformerop.model.attention.base import BackendUnavailable

from .build_lock import StaleBuildLock, claim, lock_is_busy, wait_for_lock  # noqa: F401 -- tests use them here

KERNEL_DIR = Path(__file__).resolve().parent
HEADERS = ("launchers.h", "cuda_common.cuh")  # inlined into the sources, in this order
SOURCES = ("attention.cu", "softmax.cu")  # the attention backends' kernels (other .cu files: their own extensions)

BINDING = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>  // lighter than ATen/cuda/CUDAContext.h (no cuBLAS/cuSPARSE headers)
#include <c10/cuda/CUDAGuard.h>

namespace {

tfo::DType dtype_of(const torch::Tensor& t) {
  if (t.scalar_type() == torch::kFloat32) return tfo::kFloat32;
  TORCH_CHECK(t.scalar_type() == torch::kBFloat16, "CUDA kernels take float32 or bfloat16, got ", t.scalar_type());
  return tfo::kBFloat16;
}

tfo::Bhtd bhtd(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda() && t.dim() == 4, name, " must be a 4-d CUDA tensor (B, H, T, D)");
  TORCH_CHECK(t.stride(3) == 1, name, " must have a contiguous head dim (stride(3) == 1)");
  return {t.data_ptr(), t.stride(0), t.stride(1), t.stride(2)};
}

void check_launch(cudaError_t err, const char* what) {
  TORCH_CHECK(err == cudaSuccess, what, " failed: ", cudaGetErrorString(err));
}

}  // namespace

// Writes softmax(q k^T * scale + causal) v into out (B, H, Tq, D); k, v are (B, H, Tk, D).
void attention_forward(torch::Tensor q, torch::Tensor k, torch::Tensor v, torch::Tensor out,
                       int64_t version, double scale) {
  const auto dt = dtype_of(q);
  TORCH_CHECK(k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type() &&
              out.scalar_type() == q.scalar_type(), "q, k, v and out must share one dtype");
  TORCH_CHECK(version >= 1 && version <= 5, "attention version must be 1..5, got ", version);
  const auto qv = bhtd(q, "q"), kv = bhtd(k, "k"), vv = bhtd(v, "v"), ov = bhtd(out, "out");
  const int64_t B = q.size(0), H = q.size(1), Tq = q.size(2), Tk = k.size(2), D = q.size(3);
  TORCH_CHECK(k.sizes() == v.sizes() && k.size(0) == B && k.size(1) == H && k.size(3) == D,
              "k and v must be (B, H, Tk, D) matching q ", q.sizes(), ", got ", k.sizes(), " and ", v.sizes());
  TORCH_CHECK(out.sizes() == q.sizes(), "out must have q's shape ", q.sizes());
  TORCH_CHECK(Tq <= Tk, "queries are the last Tq of Tk keys: need Tq <= Tk, got ", Tq, " > ", Tk);
  TORCH_CHECK(tfo::attention_head_dim_supported(static_cast<int>(D)), "head dim ", D, " unsupported (16, 32, 64, 128)");
  TORCH_CHECK(B * H <= 65535, "batch * heads = ", B * H, " exceeds 65535 (grid.y)");
  TORCH_CHECK(q.device() == k.device() && q.device() == v.device() && q.device() == out.device(),
              "q, k, v and out must be on one device");
  const c10::cuda::CUDAGuard guard(q.device());
  const tfo::AttnShape shape{int(B), int(H), int(Tq), int(Tk), int(D)};
  check_launch(tfo::attention_forward(int(version), dt, qv, kv, vv, ov, shape, float(scale),
                                      c10::cuda::getCurrentCUDAStream()), "attention_forward");
}

// Writes softmax over the last dim of x into y; variant 0 = block per row, 1 = warp per row.
void softmax_forward(torch::Tensor x, torch::Tensor y, int64_t variant) {
  const auto dt = dtype_of(x);
  TORCH_CHECK(x.is_cuda() && y.is_cuda() && x.device() == y.device(), "x and y must be on one CUDA device");
  TORCH_CHECK(x.is_contiguous() && y.is_contiguous(), "x and y must be contiguous");
  TORCH_CHECK(y.sizes() == x.sizes() && y.scalar_type() == x.scalar_type(), "y must match x's shape and dtype");
  TORCH_CHECK(variant == 0 || variant == 1, "softmax variant must be 0 (block) or 1 (warp), got ", variant);
  TORCH_CHECK(x.dim() >= 1, "softmax needs at least one dim");
  const int64_t n = x.size(-1), rows = n == 0 ? 0 : x.numel() / n;
  const c10::cuda::CUDAGuard guard(x.device());
  check_launch(tfo::softmax_forward(tfo::SoftmaxVariant(variant), dt, x.data_ptr(), y.data_ptr(), rows, n,
                                    c10::cuda::getCurrentCUDAStream()), "softmax_forward");
}
"""
FUNCTIONS = ["attention_forward", "softmax_forward"]


def _local_include_re():
    return re.compile(r'^\s*#include\s+"([^"]+)"\s*$', re.MULTILINE)


def _inline(text: str) -> str:
    """Drop includes of our own headers: their text is prepended once, so the build directory is
    self-contained and the .cu files can be concatenated into one translation unit."""
    return _local_include_re().sub(lambda m: "" if (KERNEL_DIR / m.group(1)).exists() else m.group(0), text)


def sources() -> tuple[str, list[str]]:
    """(C++ binding source, CUDA sources) exactly as handed to load_inline."""
    def header(h):  # `#pragma once` only warns in a main file; each header is inlined once anyway
        return (KERNEL_DIR / h).read_text().replace("#pragma once", "")
    cu = ["\n".join(header(h) for h in HEADERS)] + [_inline((KERNEL_DIR / name).read_text()) for name in SOURCES]
    cpp = header("launchers.h") + "\n" + BINDING
    return cpp, cu


def cuda_flags(arch: str) -> list[str]:
    # An explicit -gencode stops torch adding TORCH_CUDA_ARCH_LIST's flags: one arch, the device's.
    return ["-O3", "--use_fast_math", f"-gencode=arch=compute_{arch},code=sm_{arch}"]


def device_arch(device=None) -> str:
    major, minor = torch.cuda.get_device_capability(device)
    return f"{major}{minor}"


@dataclass(frozen=True)
class Extension:
    """One torch extension: its name's prefix, what it is (for messages), its sources as
    () -> (C++ sources, CUDA sources), the functions it exports to Python, and the libraries it
    links beyond torch's as () -> (include dirs, linker flags), asked at build time only. With
    `c_library`, a plain shared library instead of a Python module: its sources include only the
    headers they use (no torch header, no pybind11: a first build of a fraction of a second where
    torch's headers alone take seconds) and export `functions` as extern "C"; load() returns its
    ctypes.CDLL."""
    prefix: str
    what: str
    sources: Callable[[], tuple[list[str], list[str]]]
    functions: tuple
    libraries: Callable[[], tuple[list[str], list[str]]] = lambda: ([], [])
    c_library: bool = False

    @property
    def needs_nvcc(self) -> bool:
        return bool(self.sources()[1])


KERNELS = Extension("tfo_kernels", "the CUDA kernels", lambda: ([sources()[0]], sources()[1]), tuple(FUNCTIONS))


def extension_name(arch: str, ext: Extension = KERNELS) -> str:
    cpp, cu = ext.sources()
    h = hashlib.sha256()
    for part in [*cpp, *cu, " ".join(cuda_flags(arch)), torch.__version__, str(torch.version.cuda)]:
        h.update(part.encode())
        h.update(b"\0")
    return f"{ext.prefix}_sm{arch}_{h.hexdigest()[:12]}"


def extensions_root() -> Path:
    env = os.environ.get("TORCH_EXTENSIONS_DIR")
    return Path(env) if env else Path.home() / ".cache" / "transformerop" / "torch_extensions"


def find_nvcc() -> str | None:
    from torch.utils.cpp_extension import CUDA_HOME
    if CUDA_HOME and (Path(CUDA_HOME) / "bin" / "nvcc").exists():
        return str(Path(CUDA_HOME) / "bin" / "nvcc")
    return shutil.which("nvcc")


def require_cuda(what: str, device=None, ext: Extension = KERNELS) -> None:
    """BackendUnavailable (one line naming what is missing) unless `what` can run on device."""
    if not torch.cuda.is_available():
        raise BackendUnavailable(f"{what} needs a CUDA GPU (torch.cuda.is_available() is False)")
    if device is not None and torch.device(device).type != "cuda":
        raise BackendUnavailable(f"{what} needs a CUDA device, the run's device is {torch.device(device)}")
    if _cached_build(device_arch(), ext) is not None:
        return  # a finished build needs no compiler
    if ext.needs_nvcc and find_nvcc() is None:
        raise BackendUnavailable(f"{what} needs nvcc to build its kernels (no CUDA toolkit: set CUDA_HOME or PATH)")
    from torch.utils.cpp_extension import CUDA_HOME
    if not CUDA_HOME:
        raise BackendUnavailable(f"{what} needs the CUDA toolkit's headers to build (set CUDA_HOME)")
    if shutil.which("ninja") is None:
        raise BackendUnavailable(f"{what} needs ninja to build its kernels (pip install ninja)")


# ---- load ---------------------------------------------------------------------------------

_MODULES: dict = {}  # prefix -> loaded module
_INFO: dict = {}  # prefix -> build_info()
_LOAD_LOCK = threading.Lock()


def _cached_build(arch: str, ext: Extension = KERNELS):
    """Path of a finished build's .so (the marker is written only after load_inline succeeded)."""
    name = extension_name(arch, ext)
    d = extensions_root() / name
    so = d / f"{name}.so"
    return so if (d / "built.json").exists() and so.exists() else None


def _import_so(name: str, so: Path, ext: Extension = KERNELS):
    if ext.c_library:
        return ctypes.CDLL(str(so))
    spec = importlib.util.spec_from_file_location(name, so)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load(verbose: bool = False, ext: Extension = KERNELS):
    """The compiled extension (the CUDA kernels' attention_forward, softmax_forward unless `ext`
    names another), built on first use."""
    with _LOAD_LOCK:
        if ext.prefix in _MODULES:
            return _MODULES[ext.prefix]
        require_cuda(f"kernels/cuda_build ({ext.what})", ext=ext)
        start = time.perf_counter()
        arch = device_arch()
        name = extension_name(arch, ext)
        build_dir = extensions_root() / name
        build_dir.mkdir(parents=True, exist_ok=True)
        wait_for_lock(build_dir)
        so = _cached_build(arch, ext)
        cold = so is None
        if so is not None:
            module = _import_so(name, so, ext)
        else:
            module = _build(name, arch, build_dir, verbose, ext)
        info = _INFO[ext.prefix] = dict(name=name, build_dir=str(build_dir), arch=f"sm_{arch}", cold=cold,
                                        build_s=round(time.perf_counter() - start, 3))
        if cold:
            (build_dir / "built.json").write_text(json.dumps(info))
        _MODULES[ext.prefix] = module
        return module


def _build(name: str, arch: str, build_dir: Path, verbose: bool, ext: Extension):
    from torch.utils.cpp_extension import load_inline
    cpp, cu = ext.sources()
    includes, ldflags = ext.libraries()
    kwargs = dict(name=name, cpp_sources=cpp, cuda_sources=cu,
                  functions=None if ext.c_library else list(ext.functions), with_cuda=True, extra_cflags=["-O3"],
                  extra_cuda_cflags=cuda_flags(arch), extra_include_paths=includes, extra_ldflags=ldflags,
                  build_directory=str(build_dir), verbose=verbose, is_python_module=not ext.c_library)
    if "no_implicit_headers" in inspect.signature(load_inline).parameters:
        # keeps torch headers out of the .cu (much faster nvcc) and, for a C library, out of its
        # C++ too
        kwargs["no_implicit_headers"] = True
    claim(build_dir)
    try:
        built = load_inline(**kwargs)  # a C library's: the path of its .so
        return ctypes.CDLL(built) if ext.c_library else built
    except RuntimeError as e:
        # torch puts ninja's whole output (every compiler message) in the error: keep all of it
        raise RuntimeError(f"building {ext.what} in {build_dir} failed:\n{e}") from e


def build_info(ext: Extension = KERNELS) -> dict:
    """After load(): name, build_dir, arch, cold (compiled this time) and build_s (seconds)."""
    return dict(_INFO.get(ext.prefix, {}))


def nvcc_compile_check(path, arch: str = "sm_90") -> None:
    """Compile one .cu file with plain nvcc (no torch); RuntimeError with nvcc's full output."""
    nvcc = find_nvcc()
    if nvcc is None:
        raise BackendUnavailable("nvcc not found (no CUDA toolkit)")
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [nvcc, f"-arch={arch}", "-c", str(path), "-o", str(Path(tmp) / "out.o")]
        r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}{r.stderr}")


if __name__ == "__main__":  # python -m kernels.cuda_build: build (or load) once, print the timing
    load(verbose="-v" in sys.argv)
    print(json.dumps(build_info()))
