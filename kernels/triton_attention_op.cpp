// The Triton attention kernels behind a C++ front: a dispatcher op, its autograd node and the
// kernel launch, all in C++, so an eager forward+backward pays no Python on the hot path.
//
// Why: on the H200 a Python autograd.Function around the same kernels cost several times the
// GPU time of a short-sequence call in host work (experiments/results/h200-2026-12-01f). Here the
// Python side (kernels/triton_attention_op.py) only compiles and tunes: on the first call for a
// key, C++ calls back into Python, which runs the Triton path and hands over the CompiledKernel's
// CUfunction; every later call with that key is launched from here with cuLaunchKernel.
//
// The key is everything a Triton launch specializes on: which kernel, dtype, precision, causal,
// dropout, head dim, the power-of-two buckets of Tq, Tk and B*H (the tuning key), the device, and
// for each argument what Triton's JIT specializes (a pointer's 16-byte alignment; an int equal to
// 1 -- compiled in as a constant and dropped from the parameters --, divisible by 16, or wider
// than 32 bits). So a launch from here is exactly the launch the JIT would make.
//
// The argument lists below must stay in the order kernels/triton_attention.py passes them; the
// GPU tests compare this path with that one bit for bit.
#include <torch/extension.h>
#include <torch/csrc/autograd/custom_function.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <cmath>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace py = pybind11;
using at::Tensor;

namespace {

constexpr double kLog2e = 1.4426950408889634;

// One kernel argument: a device pointer, an integer or a float, as Triton would receive it.
struct Arg {
  char kind;  // 'p' pointer, 'i' integer, 'f' float
  void* p = nullptr;
  int64_t i = 0;
  float f = 0.f;
  bool nospec = false;  // an int the kernel marks do_not_specialize (lengths): typed by width only
};
Arg ptr(const Tensor& t) { return {'p', t.data_ptr()}; }
Arg integer(int64_t v) { return {'i', nullptr, v}; }
Arg length(int64_t v) { return {'i', nullptr, v, 0.f, true}; }
Arg real(double v) { return {'f', nullptr, 0, static_cast<float>(v)}; }

// What Triton's JIT specializes on, one character per argument (also the parameter layout).
char spec(const Arg& a) {
  if (a.kind == 'p') return reinterpret_cast<uintptr_t>(a.p) % 16 == 0 ? 'A' : 'a';
  if (a.kind == 'f') return 'f';
  const bool wide = a.i < INT32_MIN || a.i > INT32_MAX;
  if (a.nospec) return wide ? 'l' : 'd';
  if (a.i == 1) return '1';  // a constant in the compiled kernel: not a parameter
  return wide ? (a.i % 16 == 0 ? 'L' : 'l') : (a.i % 16 == 0 ? 'D' : 'd');
}
size_t param_bytes(char s) { return (s == 'd' || s == 'D' || s == 'f') ? 4 : 8; }

struct Kernel {
  CUfunction fn = nullptr;
  int block_m = 0, threads = 0, shared = 0, extra = 0;  // extra: Triton's trailing scratch pointers
};

std::mutex registry_mutex;
std::unordered_map<std::string, Kernel> registry;
std::atomic<int64_t> hits{0}, misses{0};
py::object* fallback = nullptr;  // Python's miss handler; leaked so no destructor runs after Python exits

using LaunchFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void**, void**);
using ParamInfoFn = CUresult (*)(CUfunction, size_t, size_t*, size_t*);

template <typename Fn>
Fn driver_entry(const char* name, unsigned version) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found;
  if (cudaGetDriverEntryPointByVersion(name, &fn, version, cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess)
    return nullptr;
  return reinterpret_cast<Fn>(fn);
}

int64_t bucket(int64_t t) {
  int64_t b = 1;
  while (b < t) b <<= 1;
  return b;
}
int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
Tensor unit_last(const Tensor& t) { return t.stride(-1) == 1 ? t : t.contiguous(); }

// The (B, H, T, D) output laid out (B, T, H, D) in memory, as kernels/triton_attention.py's _bthd.
Tensor bthd(const Tensor& like, int64_t T) {
  return at::empty({like.size(0), T, like.size(1), like.size(3)}, like.options()).transpose(1, 2);
}

// dq, dk, dv laid out as their inputs, the rule of _grads_like in kernels/triton_attention.py:
// views of one (B, T, 3, H, D) buffer when q, k, v have the strides of one c_attn output's heads
// (the model's head split then takes that buffer as its gradient, no copy), else each bthd.
std::tuple<Tensor, Tensor, Tensor> grads_like(const Tensor& q, const Tensor& k, const Tensor& v) {
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3);
  const std::vector<int64_t> packed = {T * 3 * H * D, D, 3 * H * D, 1};
  if (q.sizes() == k.sizes() && k.sizes() == v.sizes() && q.strides().vec() == packed &&
      k.strides().vec() == packed && v.strides().vec() == packed) {
    const Tensor g = at::empty({B, T, 3, H, D}, q.options());
    return {g.select(2, 0).transpose(1, 2), g.select(2, 1).transpose(1, 2), g.select(2, 2).transpose(1, 2)};
  }
  return {bthd(q, T), bthd(k, k.size(2)), bthd(v, v.size(2))};
}

std::string key_of(const char* kernel, const Tensor& q, int64_t t_k, bool causal, bool allow_tf32, bool dropout,
                   const std::vector<Arg>& args) {
  const int64_t B = q.size(0), H = q.size(1), t_q = q.size(2), D = q.size(3);
  const bool ieee = q.scalar_type() == at::kFloat && !allow_tf32;
  std::string key = std::string(kernel) + "|" + c10::toString(q.scalar_type()) + "|" + (ieee ? "ieee" : "tf32") +
                    "|" + std::to_string(causal) + std::to_string(dropout) + "|" + std::to_string(D) + "|" +
                    std::to_string(bucket(t_q)) + "," + std::to_string(bucket(t_k)) + "," +
                    std::to_string(bucket(B * H)) + "|" + std::to_string(q.get_device()) + "|";
  for (const auto& a : args) key += spec(a);
  return key;
}

// Launch the registered kernel for `key` on grid (programs_x(block_m), B*H); false when none is.
template <typename Programs>
bool launch(const std::string& key, const std::vector<Arg>& args, Programs programs_x, int64_t bh) {
  Kernel k;
  {
    std::lock_guard<std::mutex> lock(registry_mutex);
    auto it = registry.find(key);
    if (it == registry.end()) return false;
    k = it->second;
  }
  static const LaunchFn cu_launch = driver_entry<LaunchFn>("cuLaunchKernel", 12000);
  TORCH_CHECK(cu_launch, "triton_attention_op: cuLaunchKernel not found in the CUDA driver");
  std::vector<uint64_t> slots;
  slots.reserve(args.size() + k.extra);
  for (const auto& a : args) {
    const char s = spec(a);
    if (s == '1') continue;
    uint64_t slot = 0;
    if (a.kind == 'p') slot = reinterpret_cast<uint64_t>(a.p);
    else if (a.kind == 'f') std::memcpy(&slot, &a.f, sizeof(float));
    else if (s == 'd' || s == 'D') { const int32_t v = static_cast<int32_t>(a.i); std::memcpy(&slot, &v, 4); }
    else slot = static_cast<uint64_t>(a.i);
    slots.push_back(slot);
  }
  for (int e = 0; e < k.extra; ++e) slots.push_back(0);  // no scratch: null pointers
  std::vector<void*> params(slots.size());
  for (size_t j = 0; j < slots.size(); ++j) params[j] = &slots[j];
  auto stream = c10::cuda::getCurrentCUDAStream();
  const CUresult r = cu_launch(k.fn, static_cast<unsigned>(programs_x(k.block_m)), static_cast<unsigned>(bh), 1,
                               k.threads, 1, 1, k.shared, reinterpret_cast<CUstream>(stream.stream()),
                               params.data(), nullptr);
  TORCH_CHECK(r == CUDA_SUCCESS, "triton_attention_op: cuLaunchKernel failed (CUresult ", int(r), ") for ", key);
  hits++;
  return true;
}

py::tuple call_python(const char* kind, const std::string& key, py::tuple args) {
  TORCH_CHECK(fallback, "triton_attention_op: no Python handler set (kernels/triton_attention_op.py loads it)");
  misses++;
  return (*fallback)(kind, key, args).cast<py::tuple>();
}

void check_inputs(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double p) {
  TORCH_CHECK(p >= 0.0 && p < 1.0, "dropout_p=", p, ": need 0 <= p < 1");
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && k.sizes() == v.sizes() && q.size(0) == k.size(0) &&
                  q.size(1) == k.size(1) && q.size(3) == k.size(3),
              "expected q (B,H,Tq,D), k = v (B,H,Tk,D); got ", q.sizes(), ", ", k.sizes(), ", ", v.sizes());
  const int64_t D = q.size(3);
  TORCH_CHECK(D == 16 || D == 32 || D == 64 || D == 128, "triton attention supports head dim 16, 32, 64 or 128, not ", D);
  const auto dt = q.scalar_type();
  TORCH_CHECK((dt == at::kFloat || dt == at::kBFloat16 || dt == at::kHalf) && k.scalar_type() == dt &&
                  v.scalar_type() == dt,
              "triton attention takes float32/bfloat16/float16 q, k, v of one dtype");
  TORCH_CHECK(q.size(2) >= 1 && k.size(2) >= 1 && (!causal || q.size(2) <= k.size(2)),
              "need 1 <= Tq <= Tk for causal attention; got Tq=", q.size(2), ", Tk=", k.size(2));
  TORCH_CHECK(q.is_cuda() && k.device() == q.device() && v.device() == q.device(),
              "triton attention's C++ launch takes q, k, v on one CUDA device");
}

Tensor seed_tensor(const Tensor& q, double p, std::optional<int64_t> seed) {
  auto opts = q.options().dtype(at::kLong);
  if (p == 0.0) return at::empty({0}, opts);
  if (seed) return at::full({1}, *seed, opts);
  return at::randint(0, int64_t(1) << 62, {1}, opts);  // torch's RNG, as seed_tensor() in Python: graph-safe
}

std::tuple<Tensor, Tensor, Tensor> attn_fwd(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, bool causal,
                                            double sm_scale, bool allow_tf32, double p, std::optional<int64_t> seed) {
  check_inputs(q_in, k_in, v_in, causal, p);
  const c10::cuda::CUDAGuard guard(q_in.device());
  const Tensor q = unit_last(q_in), k = unit_last(k_in), v = unit_last(v_in);
  const int64_t B = q.size(0), H = q.size(1), t_q = q.size(2), t_k = k.size(2);
  Tensor o = bthd(q, t_q);
  Tensor lse = at::empty({B * H, t_q}, q.options().dtype(at::kFloat));
  Tensor s = seed_tensor(q, p, seed);
  const bool drop = p > 0.0;
  std::vector<Arg> args = {ptr(q), ptr(k), ptr(v), ptr(o), ptr(lse), ptr(drop ? s : lse),
                           integer(static_cast<int64_t>(std::nearbyint(p * 16777216.0))), real(1.0 / (1.0 - p)),
                           real(sm_scale * kLog2e)};
  for (const Tensor* t : {&q, &k, &v})
    for (int d = 0; d < 3; ++d) args.push_back(integer(t->stride(d)));
  args.push_back(integer(H));
  for (int64_t x : {t_q, t_k, bucket(t_q), bucket(t_k), bucket(B * H)}) args.push_back(length(x));  // _NOSPEC
  const std::string key = key_of("fwd", q, t_k, causal, allow_tf32, drop, args);
  if (!launch(key, args, [&](int bm) { return cdiv(t_q, bm); }, B * H)) {
    py::gil_scoped_acquire gil;
    auto r = call_python("fwd", key, py::make_tuple(q, k, v, causal, sm_scale, allow_tf32, p, drop ? py::cast(s) : py::none()));
    o = r[0].cast<Tensor>();
    lse = r[1].cast<Tensor>();
  }
  return {o, lse, s};
}

// atomic_dq (attention.dq=atomic): the key-tile programs add dQ into an fp32 sum (zeroed here),
// cast into dq after the launch; else the one-launch backward with dQ programs of its own.
std::tuple<Tensor, Tensor, Tensor> attn_bwd(const Tensor& do_in, const Tensor& q_in, const Tensor& k_in,
                                            const Tensor& v_in, const Tensor& o, const Tensor& lse, bool causal,
                                            double sm_scale, bool allow_tf32, double p, const Tensor& s,
                                            bool atomic_dq) {
  const c10::cuda::CUDAGuard guard(q_in.device());
  const Tensor q = unit_last(q_in), k = unit_last(k_in), v = unit_last(v_in);
  const Tensor dout = unit_last(do_in.to(o.scalar_type()));
  const int64_t B = q.size(0), H = q.size(1), t_q = q.size(2), t_k = k.size(2);
  auto [dq, dk, dv] = grads_like(q, k, v);
  const bool drop = p > 0.0;
  const Tensor dqa = atomic_dq ? at::zeros({B, t_q, H, q.size(3)}, q.options().dtype(at::kFloat)) : dq;
  std::vector<Arg> args = {ptr(q), ptr(k), ptr(v), ptr(dout), ptr(o), ptr(lse), ptr(dqa), ptr(dk), ptr(dv),
                           ptr(drop ? s : lse), integer(static_cast<int64_t>(std::nearbyint(p * 16777216.0))),
                           real(1.0 / (1.0 - p)), real(sm_scale), real(sm_scale * kLog2e)};
  for (const Tensor* t : std::initializer_list<const Tensor*>{&q, &k, &v, &dout})
    for (int d = 0; d < 3; ++d) args.push_back(integer(t->stride(d)));
  for (const Tensor* t : atomic_dq ? std::vector<const Tensor*>{&dk} : std::vector<const Tensor*>{&dq, &dk})
    for (int d = 0; d < 3; ++d) args.push_back(integer(t->stride(d)));
  args.push_back(integer(H));
  for (int64_t x : {t_q, t_k, bucket(t_q), bucket(t_k), bucket(B * H)}) args.push_back(length(x));  // _NOSPEC
  const char* kind = atomic_dq ? "bwd_atomic" : "bwd";
  const std::string key = key_of(kind, q, t_k, causal, allow_tf32, drop, args);
  const bool hit = atomic_dq ? launch(key, args, [&](int bm) { return cdiv(t_k, bm); }, B * H)
                             : launch(key, args, [&](int bm) { return cdiv(t_k, bm) + cdiv(t_q, bm); }, B * H);
  if (hit && atomic_dq) dq.copy_(dqa.transpose(1, 2));
  if (!hit) {
    py::gil_scoped_acquire gil;
    auto r = call_python(kind, key, py::make_tuple(dout, q, k, v, o, lse, causal, sm_scale, allow_tf32, p,
                                                   drop ? py::cast(s) : py::none(),
                                                   atomic_dq ? "atomic" : "query_tiles"));
    dq = r[0].cast<Tensor>();
    dk = r[1].cast<Tensor>();
    dv = r[2].cast<Tensor>();
  }
  return {dq, dk, dv};
}

// The autograd node: the forward's tensors saved in C++, the backward launched from C++.
struct AttentionFn : public torch::autograd::Function<AttentionFn> {
  static Tensor forward(torch::autograd::AutogradContext* ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                        bool causal, double sm_scale, bool allow_tf32, double p, std::optional<int64_t> seed,
                        bool atomic_dq) {
    at::AutoDispatchBelowADInplaceOrView below;
    static auto fwd = c10::Dispatcher::singleton().findSchemaOrThrow("tfo_triton::attn_fwd", "")
                          .typed<decltype(attn_fwd)>();
    auto [o, lse, s] = fwd.call(q, k, v, causal, sm_scale, allow_tf32, p, seed);
    ctx->save_for_backward({q, k, v, o, lse, s});
    ctx->saved_data["causal"] = causal;
    ctx->saved_data["sm_scale"] = sm_scale;
    ctx->saved_data["allow_tf32"] = allow_tf32;
    ctx->saved_data["p"] = p;
    ctx->saved_data["atomic_dq"] = atomic_dq;
    return o;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    at::AutoDispatchBelowADInplaceOrView below;
    static auto bwd = c10::Dispatcher::singleton().findSchemaOrThrow("tfo_triton::attn_bwd", "")
                          .typed<decltype(attn_bwd)>();
    const auto t = ctx->get_saved_variables();
    auto [dq, dk, dv] = bwd.call(grads[0], t[0], t[1], t[2], t[3], t[4], ctx->saved_data["causal"].toBool(),
                                 ctx->saved_data["sm_scale"].toDouble(), ctx->saved_data["allow_tf32"].toBool(),
                                 ctx->saved_data["p"].toDouble(), t[5], ctx->saved_data["atomic_dq"].toBool());
    return {dq, dk, dv, Tensor(), Tensor(), Tensor(), Tensor(), Tensor(), Tensor()};
  }
};

Tensor attention_autograd(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double sm_scale,
                          bool allow_tf32, double p, std::optional<int64_t> seed, bool atomic_dq) {
  return AttentionFn::apply(q, k, v, causal, sm_scale, allow_tf32, p, seed, atomic_dq);
}

Tensor attention_cuda(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double sm_scale,
                      bool allow_tf32, double p, std::optional<int64_t> seed, bool atomic_dq) {
  return std::get<0>(attn_fwd(q, k, v, causal, sm_scale, allow_tf32, p, seed));
}

}  // namespace

// Adopt a compiled Triton kernel for `key` (a key this file made). "" on success, else why not: the
// kernel then stays on the Python path. The parameter count and sizes are read from the driver,
// so a Triton whose calling convention differs is refused here rather than launched wrongly.
std::string register_kernel(const std::string& key, int64_t function, int64_t block_m, int64_t num_warps,
                            int64_t shared, int64_t scratch_bytes) {
  if (scratch_bytes != 0) return "the kernel needs Triton's scratch memory";
  static const ParamInfoFn param_info = driver_entry<ParamInfoFn>("cuFuncGetParamInfo", 12040);
  if (!param_info) return "the CUDA driver has no cuFuncGetParamInfo (needs 12.4+)";
  const auto fn = reinterpret_cast<CUfunction>(function);
  const std::string specs = key.substr(key.rfind('|') + 1);
  std::vector<size_t> want;
  for (char s : specs)
    if (s != '1') want.push_back(param_bytes(s));
  size_t n = 0, offset = 0, size = 0;
  while (param_info(fn, n, &offset, &size) == CUDA_SUCCESS) {
    const size_t expected = n < want.size() ? want[n] : 8;  // trailing: scratch pointers
    if (size != expected)
      return "parameter " + std::to_string(n) + " is " + std::to_string(size) + " bytes, expected " +
             std::to_string(expected);
    ++n;
  }
  if (n < want.size() || n > want.size() + 2)
    return "the kernel has " + std::to_string(n) + " parameters, expected " + std::to_string(want.size()) +
           " (+ up to 2 scratch pointers)";
  Kernel k{fn, int(block_m), int(32 * num_warps), int(shared), int(n - want.size())};
  std::lock_guard<std::mutex> lock(registry_mutex);
  registry[key] = k;
  return "";
}

void set_fallback(py::object handler) {
  if (!fallback) fallback = new py::object();
  *fallback = std::move(handler);
}

py::dict stats() {
  py::dict d;
  d["cpp"] = hits.load();
  d["python"] = misses.load();
  std::lock_guard<std::mutex> lock(registry_mutex);
  d["kernels"] = registry.size();
  return d;
}

void clear() {
  std::lock_guard<std::mutex> lock(registry_mutex);
  registry.clear();
}

TORCH_LIBRARY(tfo_triton, m) {
  m.def("attn_fwd(Tensor q, Tensor k, Tensor v, bool causal, float sm_scale, bool allow_tf32, float dropout_p, "
        "int? seed) -> (Tensor, Tensor, Tensor)");
  m.def("attn_bwd(Tensor grad_out, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, bool causal, "
        "float sm_scale, bool allow_tf32, float dropout_p, Tensor seed, bool atomic_dq=False) -> (Tensor, Tensor, Tensor)");
  m.def("attention(Tensor q, Tensor k, Tensor v, bool causal, float sm_scale, bool allow_tf32, float dropout_p, "
        "int? seed, bool atomic_dq=False) -> Tensor");
}

TORCH_LIBRARY_IMPL(tfo_triton, CUDA, m) {
  m.impl("attn_fwd", &attn_fwd);
  m.impl("attn_bwd", &attn_bwd);
  m.impl("attention", &attention_cuda);
}

TORCH_LIBRARY_IMPL(tfo_triton, Autograd, m) {
  m.impl("attention", &attention_autograd);
}
