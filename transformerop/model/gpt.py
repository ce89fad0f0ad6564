"""GPT from PyTorch primitives: token + position embeddings, n_layer pre-LayerNorm blocks
(causal self-attention, GELU MLP), final LayerNorm, LM head tied to the token embedding.

model.fused_norm runs the same blocks with every residual add, its dropout and the LayerNorm
after it as one Triton kernel (kernels/triton_norm.py): the same parameters, the same function,
fewer and cheaper kernels. Decoding against a KV cache keeps the plain path. model.fused_mlp
computes each MLP's GELU inside its matmul kernels (kernels/triton_mlp.py), forward and backward.
model.dense_embedding_grad takes both embeddings' gradients as dense sums (OneHotGrad below).
model.stream_dtype=bfloat16 keeps the residual stream in bf16 under autocast (fp32 otherwise).
model.fused_head computes a training or evaluation loss as the tied head and its cross-entropy in
Triton kernels (kernels/triton_head.py): the logits are not returned then (None). model.gelu picks
the MLP's GELU (erf or tanh); model.cublaslt_mlp (tanh) runs each MLP's GELU inside cuBLASLt's
matmuls (kernels/cublaslt_mlp.py), forward and backward."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..errors import ConfigError
from ..runtime import interpreting, torch_dtype
from .attention import BackendUnavailable, get_backend
from .split_k import one_hot_t_matmul


class OneHotGrad(torch.autograd.Function):
    """wte(idx) as a gather forward; backward, the weight's gradient as one_hot(idx)^T @ grad
    (split_k.one_hot_t_matmul: on CUDA one Triton kernel, kernels/triton_tn.py) where torch's
    embedding backward sorts the indices and sums their runs (about seven kernels, each of a few
    µs, ~75 µs a step for wte and wpe together on the H200 at 16,384 tokens into 65 rows). Summed
    in fp32 from the gradient's own values, for a vocabulary no larger than n_embd (off CUDA the
    one-hot is written, no larger than the gradient)."""

    @staticmethod
    def forward(ctx, idx, weight):
        ctx.save_for_backward(idx)
        ctx.rows = weight.shape[0]
        return F.embedding(idx, weight)

    @staticmethod
    def backward(ctx, grad):
        (idx,) = ctx.saved_tensors
        g = grad.reshape(-1, grad.shape[-1])
        # no id is checked against the rows on the host, so a CUDA graph captures it
        return None, one_hot_t_matmul(idx, ctx.rows, g).to(g.dtype)  # every SM busy: split_k.py


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=cfg.bias)
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.dropout = nn.Dropout(cfg.dropout)
        self.fused = bool(getattr(cfg, "fused_mlp", False))
        self.cublaslt = bool(getattr(cfg, "cublaslt_mlp", False))
        self.approximate = "tanh" if str(getattr(cfg, "gelu", "erf")) == "tanh" else "none"

    def body(self, x):
        """The MLP before its residual dropout (model.fused_norm applies that in the next kernel)."""
        if self.fused:
            from kernels.triton_mlp import fused_mlp
            return fused_mlp(x, self.c_fc, self.c_proj)
        if self.cublaslt and x.is_cuda:
            from kernels import cublaslt_mlp
            if cublaslt_mlp.runs_in_bf16(x):
                return cublaslt_mlp.mlp(x, self.c_fc, self.c_proj)
        return self.c_proj(F.gelu(self.c_fc(x), approximate=self.approximate))

    def forward(self, x):
        return self.dropout(self.body(x))


class Block(nn.Module):
    def __init__(self, cfg, attention_cls, acfg):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.attn = attention_cls(cfg, acfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.mlp = MLP(cfg)

    def forward(self, x, cache=None):
        x = x + self.attn(self.ln_1(x), cache)
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, cfg, acfg, vocab_size: int):
        super().__init__()
        self.cfg, self.vocab_size = cfg, vocab_size
        self.fused_norm = bool(getattr(cfg, "fused_norm", False))
        # wte's gradient by one-hot matmul where the vocabulary is no larger than the width (OneHotGrad)
        self.dense_embedding_grad = bool(getattr(cfg, "dense_embedding_grad", False)) and vocab_size <= cfg.n_embd
        self.bf16_stream = str(getattr(cfg, "stream_dtype", "float32")) == "bfloat16"
        self.fused_head = bool(getattr(cfg, "fused_head", False))
        if self.fused_head:  # a larger vocabulary keeps the plain head
            from kernels.triton_head import MAX_VOCAB
            self.fused_head = vocab_size <= MAX_VOCAB
        self.block_size = cfg.block_size
        self.attention_cls = get_backend(acfg.name)
        self.wte = nn.Embedding(vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg, self.attention_cls, acfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.lm_head = nn.Linear(cfg.n_embd, vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying: one matrix to embed and to read out
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):  # residual projections scaled down by depth (GPT-2)
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init_weights(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    @classmethod
    def check(cls, cfg, device) -> None:
        """Raise before any work if this model's options cannot run on device."""
        fused = [f"model.{k}=true" for k in ("fused_norm", "fused_mlp", "fused_head") if getattr(cfg.model, k, False)]
        if str(getattr(cfg.model, "stream_dtype", "float32")) == "bfloat16" and cfg.train.dtype != "bfloat16":
            raise ConfigError("model.stream_dtype=bfloat16 is the residual stream under bf16 autocast: needs "
                              "train.dtype=bfloat16 (or model.stream_dtype=float32)")
        m = cfg.model
        if str(getattr(m, "gelu", "erf")) == "tanh" and getattr(m, "fused_mlp", False):
            raise ConfigError("model.fused_mlp=true computes the erf GELU in its kernels: needs model.gelu=erf "
                              "(or model.fused_mlp=false)")
        if getattr(m, "cublaslt_mlp", False):
            cls._check_cublaslt_mlp(cfg, device)
        if getattr(cfg.model, "fused_mlp", False) and cfg.model.n_embd % 8:  # TMA rows: 16-byte aligned
            raise ConfigError(f"model.n_embd={cfg.model.n_embd}: model.fused_mlp=true needs a multiple of 8 "
                              "(its kernels load rows through TMA); use model.fused_mlp=false or another width")
        if fused:
            interpret = interpreting()
            if torch.device(device).type != "cuda" and not interpret:
                raise BackendUnavailable(f"{fused[0]} needs a CUDA GPU for its Triton kernels "
                                         "(TRITON_INTERPRET=1 runs them on CPU, slowly)")
            if interpret and cfg.train.dtype == "bfloat16":
                raise BackendUnavailable(f"{fused[0]} in bf16 needs a GPU: the Triton interpreter has "
                                         "no bf16; use train.dtype=float32 there")

    @staticmethod
    def _check_cublaslt_mlp(cfg, device) -> None:
        m, why = cfg.model, None
        if str(m.gelu) != "tanh":
            why = "computes cuBLASLt's GELU, the tanh form: needs model.gelu=tanh"
        elif m.bias:
            why = "has no bias in its epilogues: needs model.bias=false"
        elif cfg.train.dtype != "bfloat16":
            why = f"runs bf16 matmuls: needs train.dtype=bfloat16 (got {cfg.train.dtype})"
        elif m.n_embd % 8:  # cuBLASLt's aux: a leading dimension of a multiple of 8
            why = f"needs model.n_embd to be a multiple of 8 (got {m.n_embd})"
        if why:
            raise ConfigError(f"model.cublaslt_mlp=true {why} (or model.cublaslt_mlp=false)")
        from kernels.cublaslt_mlp import require
        require(device)

    @staticmethod
    def kernel_warmups(cfg, device) -> list:
        """Zero-argument calls launching, on tiny inputs, each Triton kernel a train step and an
        evaluation of this model launch (model.fused_norm, model.fused_mlp, model.fused_head; the
        attention backend's own at the step's shapes). A cold Triton cache
        compiles each form on its first launch; made before the job's first step, in threads
        (transformerop/cuda_early.py), those compiles overlap each other and the job's start-up."""
        m = cfg.model
        compute = torch_dtype(cfg.train.dtype)  # what the matmuls hand the norms: autocast's dtype, or fp32
        calls = []
        if m.fused_norm:
            from kernels.triton_norm import warmups
            for p in dict.fromkeys((m.dropout, 0.0)):  # training's dropout (forward and backward), evaluation's none
                # the stream starts at the embedding's sum, fp32 like the embedding weights under autocast
                calls += warmups(m.n_embd, m.bias, p, torch.float32, compute, compute, device, backward=p == m.dropout,
                                 stream_dtype=torch_dtype(m.stream_dtype) if m.stream_dtype == "bfloat16" else None)
        if m.fused_mlp:
            from kernels.triton_mlp import warmups
            calls += warmups(m.n_embd, m.bias, compute, device)
        if getattr(m, "cublaslt_mlp", False):  # not Triton: the extension's build or load, the handle
            from kernels.cublaslt_mlp import warmups
            calls += warmups(m.n_embd, device)
        if getattr(m, "dense_embedding_grad", False) and torch.device(device).type == "cuda":  # wte's fp32 gradient
            from kernels.triton_tn import warmups
            calls += warmups(m.n_embd, device)
        if m.fused_head:  # the head reads ln_f's output in autocast's dtype (fp32 without autocast)
            from kernels.triton_head import warmups
            calls += warmups(m.n_embd, compute, device)
        if getattr(cfg.train, "fused_step", False):  # the optimizer's kernels (transformerop/fused_step.py)
            from kernels.triton_adamw import warmups
            calls += warmups(device, compute)
        return calls + get_backend(cfg.attention.name).kernel_warmups(cfg, device)  # the attention's own

    def forward(self, idx, targets=None, caches=None, pos=None):
        """idx (B, T) token ids. With caches (one per layer), idx holds only the new tokens and
        `pos` (0-d long tensor on the device) is the position of idx[:, 0]."""
        B, T = idx.shape
        if self.dense_embedding_grad and pos is None:
            # wpe's rows 0..T-1 as a slice: their gradient is the batch's sum, not a scatter
            emb = OneHotGrad.apply(idx, self.wte.weight) + self.wpe.weight[:T]
        else:
            positions = torch.arange(T, device=idx.device)
            if pos is not None:
                positions = positions + pos
            emb = self.wte(idx) + self.wpe(positions)
        if self.fused_norm and caches is None:
            x = self._fused_blocks(emb)
        else:
            stream = self._stream_dtype(idx.device)
            if stream is not None:
                emb = emb.to(stream)
            x = self.drop(emb)
            for i, block in enumerate(self.blocks):
                x = block(x, None if caches is None else caches[i])
            x = self.ln_f(x)
        if targets is not None and self.fused_head:
            from kernels.triton_head import head_loss
            return None, head_loss(x, self.lm_head.weight, targets)
        logits = self.lm_head(x)
        loss = None
        if targets is not None:  # -1 marks positions without a target (addition prompts)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.reshape(-1), ignore_index=-1)
        return logits, loss

    def _stream_dtype(self, dev):
        """bf16 for model.stream_dtype=bfloat16 under autocast; else None (autocast's own rule)."""
        return torch.get_autocast_dtype(dev.type) if self.bf16_stream and torch.is_autocast_enabled(dev.type) else None

    def _fused_blocks(self, emb):
        """Block by block as in Block.forward, each `x = x + dropout(branch); ln(x)` one kernel:
        x, h = add_norm(x, branch, ln). Returns ln_f of the last residual."""
        from kernels.triton_norm import add_norm
        p = self.cfg.dropout if self.training else 0.0
        norms = [n for b in self.blocks for n in (b.ln_1, b.ln_2)] + [self.ln_f]
        # one draw per forward for every kernel's dropout seed: views, not launches, per kernel; rows
        # of two so that every seed is 16-byte aligned, as Triton specializes a pointer on that (one
        # kernel per form, not one for the even seeds and one for the odd)
        seeds = torch.randint(0, 2 ** 62, (len(norms), 2), device=emb.device)[:, :1] if p > 0 else [None] * len(norms)
        # the normed output in the dtype the next matmul reads: autocast's, else the weights' own
        # (bf16 weights for decoding); the residual stream fp32 unless model.stream_dtype says bf16
        dev = emb.device.type
        out = torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else self.wte.weight.dtype
        # the embedding dropout starts the stream
        x, h = add_norm(None, emb, norms[0], p, seeds[0], out, start=self._stream_dtype(emb.device))
        for i, block in enumerate(self.blocks):
            x, h = add_norm(x, block.attn.branch(h), norms[2 * i + 1], p, seeds[2 * i + 1], out)
            x, h = add_norm(x, block.mlp.body(h), norms[2 * i + 2], p, seeds[2 * i + 2], out)
        return h
