// The MLP's two GELU matmuls on cuBLASLt with the GELU in their epilogues (model.cublaslt_mlp):
//   forward   g, h = GELU_AUX(x W1^T): c_fc's matmul writes the activation g and keeps h, its input
//   backward  dh = DGELU(dy W2, h):    the gradient into g times GELU'(h), in the matmul that makes it
// so neither GELU pass reads or writes its (M, 4C) tensors on its own. cuBLASLt's GELU is the tanh
// form. A row-major (R, S) buffer is the column-major (S, R) matrix cuBLAS sees, so both calls
// compute the transposed products: forward D = h^T (N x M) = W1 (stored K x N, op T) x^T (K x M);
// backward D = dh^T = W2^T (stored N x C, op N) dy^T (C x M); the aux (h) has D's layout.
// All operands bf16 (fp32 accumulation); K, N, C multiples of 8 and pointers 16-byte aligned
// (cuBLASLt's leading-dimension rule for the aux).
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cstdint>
#include <cstring>
#include <algorithm>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace lt {

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
// rank: the chosen algorithm's place in cuBLASLt's heuristic order; us, us_first: its median time
// and the heuristic's first choice's where they were timed (0 where not: inside a capture)
struct Plan { cublasLtMatmulAlgo_t algo; size_t ws; int rank, candidates; float us, us_first; Key key; };

static std::mutex g_mu;
static std::unordered_map<Key, Plan, KeyHash>& cache() {
  static auto* c = new std::unordered_map<Key, Plan, KeyHash>();  // leaked on purpose
  return *c;
}
size_t cache_size() { std::lock_guard<std::mutex> l(g_mu); return cache().size(); }
std::vector<Plan> plans() {
  std::lock_guard<std::mutex> l(g_mu);
  std::vector<Plan> out;
  for (const auto& kv : cache()) out.push_back(kv.second);
  return out;
}

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

constexpr int kCandidates = 32;

// Median time (us, CUDA events) of 5 calls of one candidate after an untimed one; +inf if it fails.
static float median_us(cublasLtHandle_t handle, cudaStream_t stream, cublasLtMatmulDesc_t op,
                       const void* A, cublasLtMatrixLayout_t a, const void* B, cublasLtMatrixLayout_t b,
                       void* D, cublasLtMatrixLayout_t d, const cublasLtMatmulAlgo_t* algo,
                       void* ws, size_t ws_bytes) {
  const float alpha = 1.0f, beta = 0.0f, fail = 3.4e38f;
  auto call = [&] { return cublasLtMatmul(handle, op, &alpha, A, a, B, b, &beta, D, d, D, d, algo, ws, ws_bytes, stream); };
  if (call() != CUBLAS_STATUS_SUCCESS) return fail;
  cudaEvent_t start, stop;
  if (cudaEventCreate(&start) != cudaSuccess) return fail;
  if (cudaEventCreate(&stop) != cudaSuccess) { cudaEventDestroy(start); return fail; }
  std::vector<float> t;
  for (int r = 0; r < 5; ++r) {
    float ms = 0.f;
    cudaEventRecord(start, stream);
    const bool ran = call() == CUBLAS_STATUS_SUCCESS;
    cudaEventRecord(stop, stream);
    if (!ran || cudaEventSynchronize(stop) != cudaSuccess || cudaEventElapsedTime(&ms, start, stop) != cudaSuccess) break;
    t.push_back(1000.f * ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (t.size() < 5) return fail;
  std::sort(t.begin(), t.end());
  return t[2];
}

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
    // cuBLASLt's heuristic ranks its candidates by a model, and its first choice can be slow: for
    // DGELU at the MLP's shape it was a 128x128 one-warpgroup kernel at 86 us where the plain
    // matmul takes 39 (H100). So outside a capture the candidates are timed on this call's own
    // operands (its outputs are written again below) and the fastest kept; inside one, the first.
    cublasLtMatmulHeuristicResult_t res[kCandidates];
    std::memset(res, 0, sizeof(res));
    int returned = 0;
    LT_TRY(cublasLtMatmulAlgoGetHeuristic(handle, op.d, a.d, b.d, d.d, d.d, pref.d, kCandidates, res, &returned));
    std::vector<int> ok;
    for (int i = 0; i < returned; ++i)
      if (res[i].state == CUBLAS_STATUS_SUCCESS && res[i].workspaceSize <= ws_bytes) ok.push_back(i);
    if (ok.empty()) return CUBLAS_STATUS_NOT_SUPPORTED;
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    const bool capturing = cudaStreamIsCapturing(stream, &cs) != cudaSuccess || cs != cudaStreamCaptureStatusNone;
    int best = ok[0];
    float best_us = 0.f, first_us = 0.f;
    if (!capturing && ok.size() > 1) {
      best_us = 3.4e38f;
      for (int i : ok) {
        const float us = median_us(handle, stream, op.d, A, a.d, B, b.d, D, d.d, &res[i].algo, ws, ws_bytes);
        if (i == ok[0]) first_us = us;
        if (us < best_us) { best_us = us; best = i; }
      }
      if (best_us >= 3.4e38f) return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    plan.algo = res[best].algo;
    plan.ws = res[best].workspaceSize;
    plan.rank = best;
    plan.candidates = (int)ok.size();
    plan.us = best_us;
    plan.us_first = first_us;
    plan.key = key;
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

}  // namespace lt

// The C side that kernels/cublaslt_mlp.py calls through ctypes: raw pointers, sizes and the
// caller's stream; a cuBLASLt handle made once a device. No torch header is included, so a fresh
// machine's build compiles cuBLASLt's header and this file alone (a fraction of a second, where
// torch's headers alone take seconds, on the critical path of a first launch); the Python side
// checks the operands and allocates the outputs and the workspace.
namespace {
constexpr int kMaxDevices = 64;
constexpr int kFirstCallCaptured = -1;  // a status no cublasStatus_t takes
std::mutex g_handle_mu;
cublasLtHandle_t g_handles[kMaxDevices] = {};  // leaked on purpose (no teardown-order issues)

// The device's handle, made on its first call (on that device, outside a capture); nullptr with
// *status set where it cannot be.
cublasLtHandle_t handle_for(int dev, cudaStream_t stream, int* status) {
  std::lock_guard<std::mutex> l(g_handle_mu);
  if (g_handles[dev] != nullptr) return g_handles[dev];
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &cs) != cudaSuccess || cs != cudaStreamCaptureStatusNone) {
    *status = kFirstCallCaptured;
    return nullptr;
  }
  const cublasStatus_t s = cublasLtCreate(&g_handles[dev]);
  if (s != CUBLAS_STATUS_SUCCESS) { *status = (int)s; g_handles[dev] = nullptr; }
  return g_handles[dev];
}

// Runs call(handle) with dev as the current device (restored after), as cuBLASLt works on it.
template <class F>
int on_device(int dev, cudaStream_t stream, F call) {
  if (dev < 0 || dev >= kMaxDevices) return (int)CUBLAS_STATUS_INVALID_VALUE;
  int before = -1;
  if (cudaGetDevice(&before) != cudaSuccess) return (int)CUBLAS_STATUS_INTERNAL_ERROR;
  if (before != dev && cudaSetDevice(dev) != cudaSuccess) return (int)CUBLAS_STATUS_INTERNAL_ERROR;
  int status = (int)CUBLAS_STATUS_SUCCESS;
  cublasLtHandle_t h = handle_for(dev, stream, &status);
  if (h != nullptr) status = (int)call(h);
  if (before != dev) cudaSetDevice(before);
  return status;
}
}  // namespace

extern "C" {

// g, h (M, N) = GELU_tanh(x w1^T), x w1^T for x (M, K), w1 (N, K), all row-major bf16. 0 = done.
int tfo_lt_up_gelu(int dev, void* stream, void* ws, size_t ws_bytes, const void* x, const void* w1,
                   void* g, void* h, int64_t M, int64_t N, int64_t K) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  return on_device(dev, s, [&](cublasLtHandle_t lt_handle) {
    return lt::up_gelu_aux(lt_handle, s, dev, ws, ws_bytes, x, w1, g, h, M, N, K);
  });
}

// dh (M, N) = (dy w2) * GELU_tanh'(h) for dy (M, C), w2 (C, N), h (M, N), all row-major bf16.
int tfo_lt_dgelu(int dev, void* stream, void* ws, size_t ws_bytes, const void* dy, const void* w2,
                 const void* h, void* dh, int64_t M, int64_t N, int64_t C) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  return on_device(dev, s, [&](cublasLtHandle_t lt_handle) {
    return lt::dgelu(lt_handle, s, dev, ws, ws_bytes, dy, w2, h, dh, M, N, C);
  });
}

// What a status the two calls above returned means.
const char* tfo_lt_status_string(int status) {
  if (status == kFirstCallCaptured)
    return "the first call on a device must happen outside CUDA graph capture (it creates the cuBLASLt handle)";
  if (status == (int)CUBLAS_STATUS_NOT_SUPPORTED)
    return "cuBLASLt found no algorithm for this epilogue/shape/alignment";
  return cublasLtGetStatusString((cublasStatus_t)status);
}

int64_t tfo_lt_plan_count() { return (int64_t)lt::cache_size(); }

// Each plan made, 8 numbers a plan into out (room for `room` plans): epilogue, m, n, k, the
// heuristic rank chosen, candidates timed, its median us, the first choice's us. Returns how many
// plans there are (more than room: call again with more).
int64_t tfo_lt_plans(double* out, int64_t room) {
  const std::vector<lt::Plan> all = lt::plans();
  for (int64_t i = 0; i < (int64_t)all.size() && i < room; ++i) {
    const lt::Plan& p = all[i];
    const double row[8] = {(double)p.key.epilogue, (double)p.key.m, (double)p.key.n, (double)p.key.k,
                           (double)p.rank, (double)p.candidates, (double)p.us, (double)p.us_first};
    std::memcpy(out + 8 * i, row, sizeof(row));
  }
  return (int64_t)all.size();
}

int64_t tfo_lt_version() { return (int64_t)cublasLtGetVersion(); }

}  // extern "C"
