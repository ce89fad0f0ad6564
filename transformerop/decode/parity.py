"""The one decode parity check: a path against the reference path (recompute: no cache, the
whole window every token), same prompt, same seeded noise, under the window rule.

Tokens: a path must give the same tokens, except where the float64 model sees a near-tie (the
two tokens' sampling scores within NEAR_TIE of their range in fp32, within the logit tolerance in
bf16, whose logits may be that far off: rounding may pick either side of a tie, a wrong kernel
does not stay that close; kernels that sum with atomics round differently from run to run).
Logits are compared while the tokens agree (same context): within the tolerance table's entry
for the run's precision. task=generate's gate, bench's generate check and task=validate's decode
rows all call this."""
import torch

from ..measure.reference import Mismatch, check_precision, float64_model, rel_err, tolerance

NEAR_TIE = 1e-4


def _run(dec, prompt, n, seeded):
    logits = []
    tokens = dec(prompt, seeded() if seeded else None, n=n, on_logits=lambda i, x: logits.append(x.float().clone()))
    return tokens[:, prompt.size(1):].clone(), torch.stack(logits)


def _near_tie(model, context, token, ref_token, temperature: float, noise) -> float:
    """The gap between the two tokens' sampling scores under the float64 model (logits, or
    logits / temperature + the run's Gumbel noise), as a share of the scores' range."""
    with torch.no_grad():
        scores = float64_model(model)(context)[0][0, -1]
    if temperature > 0:
        scores = scores / temperature + noise.double()
    return ((scores[token] - scores[ref_token]).abs() / (scores.max() - scores.min())).item()


def parity(model, dec, prompt, n: int, dtype_name: str, seeded=None) -> dict:
    """dec (a Decoder on `model`) against a recompute Decoder of the same shape and sampling."""
    from .loop import Decoder
    from .registry import REFERENCE
    ref = Decoder(model, REFERENCE, dec.B, dec.total, dec.temperature, dec.top_k, dec.keep)
    (ref_tok, ref_log), (tok, log) = _run(ref, prompt, n, seeded), _run(dec, prompt, n, seeded)
    same = (tok == ref_tok).all(0).tolist()
    agree = same.index(False) if False in same else n
    shared = slice(0, min(agree + 1, n))  # the logits of step i depend on tokens < i only
    diff = (log[shared] - ref_log[shared]).abs().max().item()
    rel = rel_err(log[shared], ref_log[shared])
    tol = tolerance(dtype_name, prompt.device)
    out = {"parity_tokens": n, "parity_tokens_agree": agree, "parity_max_logit_diff": diff,
           "parity_rel_logit_diff": rel, "parity_tolerance": tol, "parity_precision": check_precision(dtype_name,
                                                                                                  prompt.device)}
    if not rel <= tol:
        raise Mismatch(f"decode={dec.path} differs from the reference path: relative logit difference {rel:.2e} "
                       f"exceeds {tol:g} while the tokens agree ({agree}/{n} tokens)")
    if agree < n:
        b = int((tok[:, agree] != ref_tok[:, agree]).nonzero()[0])
        context = torch.cat([prompt[b:b + 1], ref_tok[b:b + 1, :agree]], dim=1)[:, -model.block_size:]
        noise = ref.noise[prompt.size(1) + agree, b] if ref.noise is not None else None
        gap = _near_tie(model, context, int(tok[b, agree]), int(ref_tok[b, agree]), dec.temperature, noise)
        tie = NEAR_TIE if dtype_name == "float32" else tol
        if gap > tie:
            raise Mismatch(f"decode={dec.path} differs from the reference path in row {b} at new token {agree} (token "
                           f"{int(tok[b, agree])} vs {int(ref_tok[b, agree])}, a logit gap of {gap:.2e} of the range, "
                           f"over the {tie:g} a tie may span)")
        out["parity_near_tie_gap"] = gap
    return out
