"""PyTorch's fused scaled_dot_product_attention (flash / memory-efficient / math kernels)."""
import torch.nn.functional as F

from .base import CausalSelfAttention, causal_mask


class SDPAAttention(CausalSelfAttention):
    def attend(self, q, k, v, mask):
        t_q, t_k = q.size(-2), k.size(-2)
        is_causal = mask is None and t_q == t_k and t_q > 1
        if mask is None and t_q != t_k and t_q > 1:
            mask = causal_mask(t_q, t_k, q.device)  # SDPA's is_causal aligns top-left; we need bottom-right
        p = self.dropout if self.training else 0.0
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p, is_causal=is_causal)
