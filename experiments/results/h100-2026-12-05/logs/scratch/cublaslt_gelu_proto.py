"""Prototype: bf16 MLP matmuls with fused cuBLASLt GELU epilogues (Hopper, sm_90).

  mlp_up_gelu(x, w1)   -> (g, h)   h = x @ w1.T (pre-activation, cuBLASLt "aux"),
                                    g = gelu_tanh(h); one GEMM, CUBLASLT_EPILOGUE_GELU_AUX (no bias)
  mlp_dgelu(dy, w2, h) -> dh       dh = (dy @ w2) * gelu_tanh'(h); one GEMM, CUBLASLT_EPILOGUE_DGELU

Shapes (leading dims of x / dy / h are flattened into M):
  x (..., K), w1 (N, K), g/h (..., N); dy (..., C), w2 (C, N), dh (..., N). All bf16, contiguous.
  K, N, C must be multiples of 8 (leading dimensions in elements), pointers 16-byte aligned.

Row-major <-> cuBLAS column-major: a row-major (R, S) buffer is a column-major (S, R) matrix with
ld = S. So cuBLAS computes the transposed products (D = op(A) op(B), all column-major):
  forward : D = h^T (N x M)  = W1 (as K x N, ld K, TRANSA=T) * x^T (K x M, ld K, TRANSB=N)
            m=N n=M k=K  lda=K ldb=K ldc=ldd=N, aux (= h) ld = N, same layout as D.
  backward: D = dh^T (N x M) = W2^T (as N x C, ld N, TRANSA=N) * dy^T (C x M, ld C, TRANSB=N)
            m=N n=M k=C  lda=N ldb=C ldc=ldd=N, aux (= h, input) ld = N.
compute CUBLAS_COMPUTE_32F, scale type CUDA_R_32F (alpha=1, beta=0), A/B/C/D/aux CUDA_R_16BF.

The handle is our own (cublasLtCreate, one per device) and the workspace our own (32 MiB torch
tensor, one per device), both created on the first call on a device: make one call outside CUDA
graph capture first. Algorithms are cached per (device, problem, epilogue, alignments), so later
calls (and calls under capture) never re-query the heuristic. The shared per-device workspace
means: do not run these ops concurrently on two streams of one device.
"""
import glob
import os

CPP_SOURCE = r"""
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <unordered_map>

// ============ core: raw pointers, no torch ============
namespace ltgelu {

struct Key {
  int device, epilogue, transa, transb;
  int64_t m, n, k, lda, ldb, ldd, ldaux;
  int alA, alB, alD, alAux;
  bool operator==(const Key& o) const { return std::memcmp(this, &o, sizeof(Key)) == 0; }
};
struct KeyHash {
  size_t operator()(const Key& k) const {  // FNV-1a over the POD bytes
    const unsigned char* p = reinterpret_cast<const unsigned char*>(&k);
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < sizeof(Key); ++i) { h ^= p[i]; h *= 1099511628211ull; }
    return (size_t)h;
  }
};
static_assert(sizeof(Key) == 88, "Key must have no padding (memcmp/hash)");
struct Plan { cublasLtMatmulAlgo_t algo; size_t ws; };

static std::mutex g_mu;
static std::unordered_map<Key, Plan, KeyHash>& cache() {
  static auto* c = new std::unordered_map<Key, Plan, KeyHash>();  // leaked on purpose
  return *c;
}
size_t cache_size() { std::lock_guard<std::mutex> l(g_mu); return cache().size(); }

static int align_of(const void* p) {
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  int al = 256;
  while (al > 1 && (a % (uintptr_t)al) != 0) al >>= 1;
  return al;
}

// RAII holders so an early return never leaks descriptors.
struct Desc { cublasLtMatmulDesc_t d = nullptr; ~Desc() { if (d) cublasLtMatmulDescDestroy(d); } };
struct Lay { cublasLtMatrixLayout_t d = nullptr; ~Lay() { if (d) cublasLtMatrixLayoutDestroy(d); } };
struct Pref { cublasLtMatmulPreference_t d = nullptr; ~Pref() { if (d) cublasLtMatmulPreferenceDestroy(d); } };

#define LT_TRY(x) do { cublasStatus_t s_ = (x); if (s_ != CUBLAS_STATUS_SUCCESS) return s_; } while (0)

// D(m x n, col-major, ld ldd) = epilogue(op(A) op(B)), aux (m x n, ld ldaux) is written
// (GELU_AUX) or read (DGELU). Returns CUBLAS_STATUS_NOT_SUPPORTED if no algorithm exists.
cublasStatus_t gemm_epilogue(cublasLtHandle_t handle, cudaStream_t stream, int device,
                             void* ws, size_t ws_bytes, cublasLtEpilogue_t epi,
                             cublasOperation_t ta, cublasOperation_t tb,
                             int64_t m, int64_t n, int64_t k,
                             const void* A, int64_t lda, const void* B, int64_t ldb,
                             void* D, int64_t ldd, void* aux, int64_t ldaux) {
  const cudaDataType_t bf16 = CUDA_R_16BF;
  Desc op;
  LT_TRY(cublasLtMatmulDescCreate(&op.d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  LT_TRY(cublasLtMatmulDescSetAttribute(op.d, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  LT_TRY(cublasLtMatmulDescSetAttribute(op.d, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  LT_TRY(cublasLtMatmulDescSetAttribute(op.d, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
  LT_TRY(cublasLtMatmulDescSetAttribute(op.d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
  LT_TRY(cublasLtMatmulDescSetAttribute(op.d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ldaux, sizeof(ldaux)));
  int32_t aux_type = (int32_t)bf16;  // default (-1) would also mean "type of D" = bf16
  LT_TRY(cublasLtMatmulDescSetAttribute(op.d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &aux_type, sizeof(aux_type)));

  // Layouts describe the matrices as stored (before op): A is (m x k) or, transposed, (k x m).
  Lay a, b, d;
  LT_TRY(cublasLtMatrixLayoutCreate(&a.d, bf16, ta == CUBLAS_OP_N ? m : k, ta == CUBLAS_OP_N ? k : m, lda));
  LT_TRY(cublasLtMatrixLayoutCreate(&b.d, bf16, tb == CUBLAS_OP_N ? k : n, tb == CUBLAS_OP_N ? n : k, ldb));
  LT_TRY(cublasLtMatrixLayoutCreate(&d.d, bf16, m, n, ldd));  // also used for C (beta = 0)

  Key key{device, (int)epi, (int)ta, (int)tb, m, n, k, lda, ldb, ldd, ldaux,
          align_of(A), align_of(B), align_of(D), align_of(aux)};
  Plan plan;
  bool hit = false;
  {
    std::lock_guard<std::mutex> l(g_mu);
    auto it = cache().find(key);
    if (it != cache().end()) { plan = it->second; hit = true; }
  }
  if (!hit) {
    Pref pref;
    LT_TRY(cublasLtMatmulPreferenceCreate(&pref.d));
    uint64_t wsz = ws_bytes;
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref.d, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsz, sizeof(wsz)));
    uint32_t al[4] = {(uint32_t)key.alA, (uint32_t)key.alB, (uint32_t)key.alD, (uint32_t)key.alD};
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref.d, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al[0], sizeof(uint32_t)));
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref.d, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al[1], sizeof(uint32_t)));
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref.d, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al[2], sizeof(uint32_t)));
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref.d, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al[3], sizeof(uint32_t)));
    // (the aux pointer's alignment is read from its value in the descriptor; it is in the key)
    cublasLtMatmulHeuristicResult_t res;
    std::memset(&res, 0, sizeof(res));
    int returned = 0;
    LT_TRY(cublasLtMatmulAlgoGetHeuristic(handle, op.d, a.d, b.d, d.d, d.d, pref.d, 1, &res, &returned));
    if (returned == 0 || res.state != CUBLAS_STATUS_SUCCESS) return CUBLAS_STATUS_NOT_SUPPORTED;
    plan.algo = res.algo;
    plan.ws = res.workspaceSize;
    std::lock_guard<std::mutex> l(g_mu);
    cache().emplace(key, plan);
  }
  const float alpha = 1.0f, beta = 0.0f;
  return cublasLtMatmul(handle, op.d, &alpha, A, a.d, B, b.d, &beta, D, d.d, D, d.d,
                        &plan.algo, ws, ws_bytes, stream);
}

// x (M,K), w1 (N,K) row-major -> g (M,N) = gelu_tanh(h), h (M,N) = x w1^T. Row-major outputs.
cublasStatus_t up_gelu_aux(cublasLtHandle_t h, cudaStream_t s, int dev, void* ws, size_t wsb,
                           const void* x, const void* w1, void* g, void* pre,
                           int64_t M, int64_t N, int64_t K) {
  return gemm_epilogue(h, s, dev, ws, wsb, CUBLASLT_EPILOGUE_GELU_AUX, CUBLAS_OP_T, CUBLAS_OP_N,
                       /*m*/N, /*n*/M, /*k*/K, w1, /*lda*/K, x, /*ldb*/K, g, /*ldd*/N, pre, /*ldaux*/N);
}

// dy (M,C), w2 (C,N), pre (M,N) row-major -> dh (M,N) = (dy w2) * gelu_tanh'(pre).
cublasStatus_t dgelu(cublasLtHandle_t h, cudaStream_t s, int dev, void* ws, size_t wsb,
                     const void* dy, const void* w2, const void* pre, void* dh,
                     int64_t M, int64_t N, int64_t C) {
  return gemm_epilogue(h, s, dev, ws, wsb, CUBLASLT_EPILOGUE_DGELU, CUBLAS_OP_N, CUBLAS_OP_N,
                       /*m*/N, /*n*/M, /*k*/C, w2, /*lda*/N, dy, /*ldb*/C, dh, /*ldd*/N,
                       const_cast<void*>(pre), /*ldaux*/N);
}

}  // namespace ltgelu

// ============ thin torch binding ============
#ifndef LTGELU_CORE_ONLY
#include <torch/extension.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <vector>

namespace {
constexpr size_t kWorkspaceBytes = 32u << 20;  // cuBLAS recommends 32 MiB on Hopper

struct DevState { cublasLtHandle_t handle = nullptr; at::Tensor* ws = nullptr; };
std::mutex g_state_mu;
DevState g_state[64];  // handles/workspaces are leaked on purpose (no teardown-order issues)

DevState& state_for(int dev, cudaStream_t stream) {
  TORCH_CHECK(dev >= 0 && dev < 64, "device index out of range");
  std::lock_guard<std::mutex> l(g_state_mu);
  DevState& st = g_state[dev];
  if (st.handle == nullptr) {
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    TORCH_CHECK(cudaStreamIsCapturing(stream, &cs) == cudaSuccess && cs == cudaStreamCaptureStatusNone,
                "ltgelu: first call on a device must happen outside CUDA graph capture "
                "(it creates the cuBLASLt handle and the workspace)");
    cublasLtHandle_t h = nullptr;
    cublasStatus_t s = cublasLtCreate(&h);
    TORCH_CHECK(s == CUBLAS_STATUS_SUCCESS, "cublasLtCreate: ", cublasLtGetStatusString(s));
    st.ws = new at::Tensor(at::empty({(int64_t)kWorkspaceBytes},
                                     at::TensorOptions().dtype(at::kByte).device(at::kCUDA, dev)));
    st.handle = h;
  }
  return st;
}

void check_operand(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor");
  TORCH_CHECK(t.scalar_type() == at::kBFloat16, name, " must be bfloat16");
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
  TORCH_CHECK(reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0, name, " must be 16-byte aligned");
}

void check_status(cublasStatus_t s, const char* what) {
  TORCH_CHECK(s != CUBLAS_STATUS_NOT_SUPPORTED, what,
              ": cuBLASLt found no algorithm for this epilogue/shape/alignment");
  TORCH_CHECK(s == CUBLAS_STATUS_SUCCESS, what, ": ", cublasLtGetStatusString(s));
}
}  // namespace

std::vector<at::Tensor> mlp_up_gelu(const at::Tensor& x, const at::Tensor& w1) {
  check_operand(x, "x"); check_operand(w1, "w1");
  TORCH_CHECK(w1.dim() == 2 && x.dim() >= 2, "x (..., K), w1 (N, K)");
  const int64_t K = x.size(-1), N = w1.size(0), M = x.numel() / K;
  TORCH_CHECK(w1.size(1) == K, "w1 must be (N, K) with K = x.size(-1)");
  TORCH_CHECK(K % 8 == 0 && N % 8 == 0, "K and N must be multiples of 8");
  TORCH_CHECK(x.get_device() == w1.get_device(), "x and w1 on different devices");
  c10::cuda::CUDAGuard guard(x.device());
  auto sizes = x.sizes().vec();
  sizes.back() = N;
  at::Tensor g = at::empty(sizes, x.options());
  at::Tensor h = at::empty(sizes, x.options());
  if (M == 0) return {g, h};
  const int dev = x.get_device();
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream(dev).stream();
  DevState& st = state_for(dev, stream);
  check_status(ltgelu::up_gelu_aux(st.handle, stream, dev, st.ws->data_ptr(), kWorkspaceBytes,
                                   x.data_ptr(), w1.data_ptr(), g.data_ptr(), h.data_ptr(), M, N, K),
               "mlp_up_gelu (GELU_AUX)");
  return {g, h};
}

at::Tensor mlp_dgelu(const at::Tensor& dy, const at::Tensor& w2, const at::Tensor& h) {
  check_operand(dy, "dy"); check_operand(w2, "w2"); check_operand(h, "h");
  TORCH_CHECK(w2.dim() == 2 && dy.dim() >= 2, "dy (..., C), w2 (C, N)");
  const int64_t C = dy.size(-1), N = w2.size(1), M = dy.numel() / C;
  TORCH_CHECK(w2.size(0) == C, "w2 must be (C, N) with C = dy.size(-1)");
  TORCH_CHECK(h.size(-1) == N && h.numel() == M * N, "h must be (..., N) matching dy's leading dims");
  TORCH_CHECK(C % 8 == 0 && N % 8 == 0, "C and N must be multiples of 8");
  TORCH_CHECK(dy.get_device() == w2.get_device() && dy.get_device() == h.get_device(), "device mismatch");
  c10::cuda::CUDAGuard guard(dy.device());
  at::Tensor dh = at::empty(h.sizes(), h.options());
  if (M == 0) return dh;
  const int dev = dy.get_device();
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream(dev).stream();
  DevState& st = state_for(dev, stream);
  check_status(ltgelu::dgelu(st.handle, stream, dev, st.ws->data_ptr(), kWorkspaceBytes,
                             dy.data_ptr(), w2.data_ptr(), h.data_ptr(), dh.data_ptr(), M, N, C),
               "mlp_dgelu (DGELU)");
  return dh;
}

int64_t plan_cache_size() { return (int64_t)ltgelu::cache_size(); }
int64_t cublaslt_version() { return (int64_t)cublasLtGetVersion(); }
#endif  // LTGELU_CORE_ONLY
"""

FUNCTIONS = ["mlp_up_gelu", "mlp_dgelu", "plan_cache_size", "cublaslt_version"]


def _cublas_paths():
    """(include_dirs, ldflags) for cuBLASLt: the toolkit's if it has cublasLt.h, else pip's nvidia-cublas."""
    from torch.utils.cpp_extension import CUDA_HOME
    if CUDA_HOME and os.path.exists(os.path.join(CUDA_HOME, "include", "cublasLt.h")):
        return [], ["-lcublasLt"]
    try:
        import nvidia  # namespace package from the nvidia-cublas(-cu12) wheel
        roots = list(nvidia.__path__)
    except ImportError:
        roots = []
    roots += [p for p in os.environ.get("LTGELU_CUBLAS_ROOT", "").split(os.pathsep) if p]
    for root in roots:
        for inc in glob.glob(os.path.join(root, "**", "include", "cublasLt.h"), recursive=True):
            base = os.path.dirname(os.path.dirname(inc))
            libs = sorted(glob.glob(os.path.join(base, "lib", "libcublasLt.so*")))
            if libs:
                libdir = os.path.dirname(libs[0])
                return [os.path.dirname(inc)], [libs[0], f"-Wl,-rpath,{libdir}"]
    return [], ["-lcublasLt"]


def load(verbose=False, build_directory=None, extra_include_paths=()):
    from torch.utils.cpp_extension import load_inline
    inc, ld = _cublas_paths()
    return load_inline(
        name="ltgelu_proto",
        cpp_sources=[CPP_SOURCE],
        functions=FUNCTIONS,
        with_cuda=True,
        extra_cflags=["-O2"],
        extra_include_paths=inc + list(extra_include_paths),
        extra_ldflags=ld,
        build_directory=build_directory,
        verbose=verbose,
    )


if __name__ == "__main__":  # compile check: `python proto.py` writes the source and builds it
    import sys
    m = load(verbose=True)
    print("loaded", m, "cublasLt", m.cublaslt_version(), file=sys.stderr)
