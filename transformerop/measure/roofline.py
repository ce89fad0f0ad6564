"""Napkin math for the GPT: parameters, memory, FLOPs, bytes moved, roofline and launch-bound
times, Amdahl's law. Pure functions of the shape (no torch, no device), so a CPU-only user can
plan a GPU run and every number can be checked by hand (tests/test_measure.py does).

Conventions (C = n_embd, L = n_layer, H = n_head, V = vocab, T = context length):
- FLOPs: 2 per multiply-accumulate; an (M, K) @ (K, N) matmul is 2*M*K*N.
- Matmul parameters N_mm = 12*L*C^2 + V*C: per layer qkv 3C^2, out-proj C^2, MLP 8C^2, plus the
  LM head (tied to the token embedding, but used once as a matmul). Embedding lookups, biases,
  LayerNorms and elementwise ops are left out of the FLOPs (< 1% here).
- Attention at context T: q.k^T and att.v cost 2*T*C each per layer and token, i.e. 4*L*T*C,
  over the full T x T (what `naive` computes). A backend that skips what the causal mask hides
  (`skips_masked`: the fused kernels) computes (T+1)/2 keys per query on average over a causal
  pass of T tokens, 2*L*(T+1)*C per token; a decode step's one query sees all T keys either way.
- Forward per token 2*N_mm + 4*L*T*C; training = 3x forward (backward = 2x forward):
  6*N_mm + 12*L*T*C -- the "6N + attention" rule.
- Memory: fp32 master weights (bf16 runs use autocast), fp32 grads, AdamW's two fp32 moments:
  4 + 4 + 8 = 16 bytes per parameter.
"""
import math
from dataclasses import dataclass


@dataclass(frozen=True)
class GPTShape:
    n_layer: int
    n_head: int
    n_embd: int
    block_size: int
    vocab_size: int
    bias: bool = True
    dropout: float = 0.0
    name: str = "gpt"  # gpt | bigram
    # what the attention backend declares (model/attention/base.py), a fused kernel by default
    fused_attention: bool = True  # never materializes the T x T scores in memory
    causal_skip: bool = False  # computes only the scores the causal mask keeps (the FLOPs)
    per_head_projections: bool = False  # q/k/v as a bias-free Linear per head instead of one c_attn
    attention_kernels: int = 1  # kernels one layer's attention launches eagerly, without dropout
    attention_kernels_dropout: int = 1  # ... with attention dropout
    fused_norm: bool = False  # model.fused_norm: residual add + dropout + LayerNorm as one kernel
    fused_mlp: bool = False  # model.fused_mlp or model.cublaslt_mlp: GELU in the MLP matmul's epilogue, each way


def shape_of(model_cfg, vocab_size: int, backend=None) -> GPTShape:
    """The shape the napkin math needs; `backend` (an attention class) says what its attention costs."""
    m = model_cfg
    extra = {}
    if backend is not None:
        extra = dict(fused_attention=backend.fused, causal_skip=bool(getattr(backend, "skips_masked", False)),
                     per_head_projections=backend.per_head_projections,
                     attention_kernels=backend.kernels_per_layer(m.n_head, False),
                     attention_kernels_dropout=backend.kernels_per_layer(m.n_head, True))
    return GPTShape(m.n_layer, m.n_head, m.n_embd, m.block_size, vocab_size, bool(m.bias), float(m.dropout),
                    m.name, fused_norm=bool(getattr(m, "fused_norm", False)),
                    fused_mlp=bool(getattr(m, "fused_mlp", False) or getattr(m, "cublaslt_mlp", False)), **extra)


def dtype_bytes(dtype_name: str) -> int:
    return 2 if dtype_name in ("bfloat16", "float16") else 4


# -- parameters and their memory -------------------------------------------------------------------
def param_count(s: GPTShape) -> int:
    """Exactly what count_params(build_model(...)) returns (LM head tied: counted once)."""
    V, C, L = s.vocab_size, s.n_embd, s.n_layer
    if s.name == "bigram":
        return V * V
    ln = (2 if s.bias else 1) * C  # LayerNorm weight (+ bias)
    qkv_bias = 3 * C if s.bias and not s.per_head_projections else 0  # per-head q/k/v carry no bias
    other_bias = (C + 4 * C + C) if s.bias else 0  # attn out-proj, MLP up, MLP down
    per_layer = 12 * C * C + qkv_bias + other_bias + 2 * ln
    return V * C + s.block_size * C + L * per_layer + ln


def matmul_params(s: GPTShape) -> int:
    """N_mm: the weights that take part in a matmul once per token (LM head included)."""
    if s.name == "bigram":
        return 0
    return 12 * s.n_layer * s.n_embd ** 2 + s.vocab_size * s.n_embd


def param_tensors(s: GPTShape) -> int:
    """How many parameter tensors the optimizer walks (sets the per-tensor op count on CPU)."""
    if s.name == "bigram":
        return 1
    per_layer = 12 if s.bias else 6  # 2 LayerNorms + 4 Linears, weight (+ bias) each
    if s.per_head_projections:
        per_layer += 3 * s.n_head - 1 - (1 if s.bias else 0)  # q/k/v per head replace c_attn
    return s.n_layer * per_layer + 2 + (2 if s.bias else 1)  # + wte, wpe, ln_f


def param_memory(s: GPTShape) -> dict:
    """Bytes for fp32 weights, fp32 grads and AdamW's two moments."""
    n = param_count(s)
    mem = {"weights": 4 * n, "grads": 4 * n, "optimizer": 8 * n}
    mem["total"] = sum(mem.values())
    return mem


# -- activations and KV cache ------------------------------------------------------------------------
def layer_activation_bytes_per_token(s: GPTShape, seq_len: int, el: int, drop: bool) -> int:
    """What autograd keeps per token in one block (el = bytes per activation element).
    Inputs of ln_1, c_attn, ln_2, c_fc and both out-projections (6C); q, k, v (3C); GELU input
    and output (8C); fused attention keeps its output (C): 17C. Naive attention keeps the softmax
    output instead (H*T per token), and the dropout output too when dropout is on. Dropout masks
    are one byte per element."""
    C, H, T = s.n_embd, s.n_head, seq_len
    if s.fused_attention:
        return 17 * C * el + (2 * C if drop else 0)
    return (16 * C + H * T * (2 if drop else 1)) * el + ((2 * C + H * T) if drop else 0)


def activation_bytes_per_token(s: GPTShape, seq_len: int, el: int, training: bool = True) -> int:
    """Saved for the backward pass, per token: every layer, plus ln_f and LM-head inputs (2C), the
    logits (V, el) and their fp32 log-softmax (4V), plus the embedding dropout mask. Good to
    +-30%: autocast keeps the residual stream in fp32, which this ignores."""
    if s.name == "bigram":
        return s.vocab_size * (el + 4)
    drop = training and s.dropout > 0
    model_level = 2 * s.n_embd * el + s.vocab_size * (el + 4) + (s.n_embd if drop else 0)
    return s.n_layer * layer_activation_bytes_per_token(s, seq_len, el, drop) + model_level


def inference_live_bytes_per_token(s: GPTShape, seq_len: int, el: int) -> int:
    """Inference frees activations layer by layer: about one block's worth plus the logits live."""
    if s.name == "bigram":
        return s.vocab_size * el
    return layer_activation_bytes_per_token(s, seq_len, el, drop=False) + s.vocab_size * el


def kv_cache_bytes(s: GPTShape, batch: int, seq_len: int, el: int) -> int:
    """K and V for every layer: 2 * L * B * T * C elements."""
    return 2 * s.n_layer * batch * seq_len * s.n_embd * el


# -- FLOPs -----------------------------------------------------------------------------------------
def flops_per_token(s: GPTShape, seq_len: int, causal_pass: bool = True) -> dict:
    """Forward and training FLOPs per token at context seq_len, attention term separate.
    causal_pass: the token is one of a causal pass over seq_len tokens (training, a forward, a
    prefill), so a backend that skips masked scores sees (seq_len+1)/2 keys on average; False: one
    query against seq_len keys (a decode step)."""
    matmul = 2 * matmul_params(s)
    keys2 = seq_len + 1 if causal_pass and s.causal_skip else 2 * seq_len  # twice the keys per query
    attention = 0 if s.name == "bigram" else 2 * s.n_layer * keys2 * s.n_embd
    forward = matmul + attention
    return {"matmul": matmul, "attention": attention, "forward": forward,
            "train": 3 * forward, "train_attention": 3 * attention}


def matmul_cost(M: int, N: int, K: int, el: int) -> dict:
    """(M, K) @ (K, N): each operand read once, the result written once."""
    return {"flops": 2 * M * N * K, "bytes": (M * K + K * N + M * N) * el}


def softmax_cost(rows: int, cols: int, el: int) -> dict:
    """Row softmax: read once, write once; ~5 FLOPs per element (max, sub, exp, sum, div)."""
    return {"flops": 5 * rows * cols, "bytes": 2 * rows * cols * el}


def attention_cost(B: int, H: int, T: int, D: int, el: int, fused: bool, backward: bool = False,
                   causal_skip: bool = False) -> dict:
    """causal softmax(q k^T) v: over the full T x T, or its T(T+1)/2 kept scores when the kernel
    skips the masked ones (causal_skip). Fused kernels move only q, k, v, out; naive writes and
    reads the scores ~4 times (scores, masked, softmax, read by att @ v). Backward: 2x FLOPs,
    bytes ~2x (plus dq, dk, dv, dout)."""
    flops = 2 * B * H * T * (T + 1) * D if causal_skip else 4 * B * H * T * T * D
    bytes_ = 4 * B * H * T * D * el + (0 if fused else 8 * B * H * T * T * el)
    if backward:
        flops, bytes_ = 3 * flops, 3 * bytes_ + 4 * B * H * T * D * el
    return {"flops": flops, "bytes": bytes_}


# -- bytes moved -----------------------------------------------------------------------------------
def forward_bytes(s: GPTShape, tokens: int, seq_len: int, el: int) -> int:
    """Inference forward: read the fp32 matmul weights once, write and read every activation."""
    act = activation_bytes_per_token(s, seq_len, el, training=False)
    return 4 * matmul_params(s) + 2 * tokens * act


def train_step_bytes(s: GPTShape, tokens: int, seq_len: int, el: int) -> int:
    """One optimizer step, lower bound. Per parameter: weights read in forward and backward (8),
    grads written (4), grad clipping reads grads twice and writes once (12), AdamW reads p, g, m, v
    and writes p, m, v (28): 52 bytes. Activations: written in forward, read in backward, and the
    same volume of activation gradients written and read: 4x the saved bytes."""
    act = activation_bytes_per_token(s, seq_len, el, training=True)
    return 52 * param_count(s) + 4 * tokens * act


def decode_token_cost(s: GPTShape, batch: int, context: int, el: int, cached: bool = True) -> dict:
    """One new token for each of `batch` sequences at `context` tokens so far. Cached: one token
    through the model, reading every weight and the whole KV cache. Recompute: the whole context
    goes through the model again (context tokens at attention length context)."""
    if cached:
        f = flops_per_token(s, context, causal_pass=False)["forward"] * batch
        b = 4 * matmul_params(s) + kv_cache_bytes(s, batch, context, el)
    else:
        f = flops_per_token(s, context)["forward"] * batch * context
        b = forward_bytes(s, batch * context, context, el)
    return {"flops": f, "bytes": b}


def arithmetic_intensity(flops: float, bytes_: float) -> float:
    """FLOPs per byte moved: above the device's ridge point (peak / bandwidth) means compute-bound."""
    return flops / bytes_ if bytes_ else math.inf


# -- time bounds -----------------------------------------------------------------------------------
def roofline_ms(flops: float, bytes_: float, peak_flops: float, bandwidth: float) -> dict:
    """The faster-than-this-is-impossible time: max(compute time, memory time)."""
    compute = 1e3 * flops / peak_flops
    memory = 1e3 * bytes_ / bandwidth
    return {"compute_ms": compute, "memory_ms": memory, "bound_ms": max(compute, memory),
            "bound": "compute" if compute >= memory else "memory"}


def launch_ms(kernels: float, per_launch_us: float) -> float:
    """Launch-overhead term: kernels per step x measured host cost of one kernel."""
    return kernels * per_launch_us / 1e3


def combine_ms(roofline: float, launch: float, overlapped: bool) -> float:
    """GPU: the host queues kernels while the device runs earlier ones, so the step takes the
    longer of the two. CPU: the host *is* the device, so dispatch and compute add up."""
    return max(roofline, launch) if overlapped else roofline + launch


def amdahl(share: float, op_speedup: float) -> float:
    """End-to-end speedup when a component taking `share` of the time gets op_speedup x faster."""
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"share={share} must be in [0, 1]")
    return 1.0 / ((1.0 - share) + share / op_speedup)


# -- kernel counts (the launch term) -----------------------------------------------------------------
def attention_kernels(s: GPTShape, drop: bool) -> int:
    """Kernels one layer's attend() launches in eager mode (the backend's declaration)."""
    return s.attention_kernels_dropout if drop else s.attention_kernels


def kernels_per_forward(s: GPTShape, training: bool = False, with_loss: bool = False,
                        bf16: bool = False) -> int:
    """Eager kernel launches in one forward. Per layer: ln_1, c_attn, attention, transpose copy,
    c_proj, +residual, ln_2, c_fc, gelu, c_proj, +residual (10 + attention), two dropouts when
    active. Model: arange, 2 embeddings, add, (dropout), ln_f, LM head; loss: log_softmax + nll.
    bf16 autocast adds casts: 4 weights + 2 inputs per layer, the LM head's weight and input.
    fused_norm: each layer's two (dropout +) residual add + LayerNorm are 2 kernels, not 4 (6
    with dropout), and write what the next matmul reads (no input casts); the embedding dropout
    and ln_f are the first and last of them, with one seed draw when dropout is on. fused_mlp:
    c_fc and gelu are one kernel."""
    if s.name == "bigram":
        return 1 + (2 if with_loss else 0)
    drop = training and s.dropout > 0
    per_layer = 10 + attention_kernels(s, drop) + (2 if drop else 0) + (6 if bf16 else 0)
    model = 4 + int(drop) + 2 + (2 if bf16 else 0)
    if s.fused_norm:
        per_layer -= 2 + (2 if drop else 0) + (2 if bf16 else 0)
        model -= int(bf16)
    if s.fused_mlp:
        per_layer -= 1
    loss = (2 + int(bf16)) if with_loss else 0  # bf16: logits.float() is one more kernel
    return s.n_layer * per_layer + model + loss


def kernels_per_decode_token(s: GPTShape, bf16: bool = False) -> int:
    """One eager decode step: a forward, then sample and append (4 small ops)."""
    return kernels_per_forward(s, bf16=bf16) + 4


def kernels_per_train_step(s: GPTShape, bf16: bool = False, fused_optimizer: bool = True,
                           grad_clip: bool = True, micro_steps: int = 1) -> int:
    """Per micro-step: batch draw (~4) + forward + backward (~3x forward: each Linear's backward
    is 2 matmuls + a bias reduction, LayerNorm's 2 kernels, gradient accumulation adds, the
    embedding backward); then grad clipping + AdamW once. Fused (CUDA): multi-tensor kernels,
    ~10 launches in all. Unfused (CPU): per parameter tensor ~9 AdamW ops and 2 clipping ops.
    Checked on the H200 profiler for the seed GPT: 361 (fp32) and 523 (bf16) device ops per step,
    this gives 362 and 518. A bias-free model drops each Linear's bias reduction (4 a layer) and,
    in bf16, its bias casts (4 more); measured bias-free bf16: 425 (this gives 470), with
    fused_norm 352 (this: 322)."""
    fwd = kernels_per_forward(s, training=True, with_loss=True, bf16=bf16)
    no_bias = s.n_layer * 4 * (1 + int(bf16)) if s.name != "bigram" and not s.bias else 0
    p = param_tensors(s)
    if fused_optimizer:
        opt = 10
    else:
        opt = 9 * p + ((2 * p + 4) if grad_clip else 0)
    return micro_steps * (4 + 4 * fwd - no_bias) + opt
