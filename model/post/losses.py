"""The post-training objectives as pure functions of tensors (tested on hand-computed
values in tests/model/post/test_post_losses.py).

Conventions: `logp` are per-token log-probabilities of the sampled / given tokens (B, T),
`mask` (B, T) marks the reply tokens, sequence log-probabilities are sums over the mask.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log p(target) per position in fp32 (B, T); IGNORE (-100) targets give 0."""
    safe = targets.clamp(min=0)
    logp = torch.log_softmax(logits.float(), dim=-1).gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    return logp * (targets >= 0)


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    mask = mask.to(x.dtype)
    if dim is None:
        return (x * mask).sum() / mask.sum().clamp(min=1)
    return (x * mask).sum(dim) / mask.sum(dim).clamp(min=1)


def sft_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the trained (assistant) tokens only."""
    return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), ignore_index=-100)


def bradley_terry_loss(chosen: torch.Tensor, rejected: torch.Tensor) -> torch.Tensor:
    """-log sigmoid(r_chosen - r_rejected): the reward model's pairwise likelihood."""
    return -F.logsigmoid(chosen - rejected).mean()


def dpo_loss(pi_chosen: torch.Tensor, pi_rejected: torch.Tensor, ref_chosen: torch.Tensor,
             ref_rejected: torch.Tensor, beta: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """DPO (Rafailov et al. 2023) on sequence log-probabilities. Returns the loss and the
    implicit rewards beta * (log pi - log ref) of the chosen and rejected replies."""
    r_c = beta * (pi_chosen - ref_chosen)
    r_r = beta * (pi_rejected - ref_rejected)
    return -F.logsigmoid(r_c - r_r).mean(), r_c.detach(), r_r.detach()


def orpo_loss(mean_logp_chosen: torch.Tensor, mean_logp_rejected: torch.Tensor, nll_chosen: torch.Tensor,
              lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """ORPO (Hong et al. 2024), no reference model: NLL of the chosen reply plus
    lam * -log sigmoid(log odds(chosen) - log odds(rejected)), with odds p / (1 - p) of the
    length-normalised probability p = exp(mean token log-probability)."""
    def log_odds(m: torch.Tensor) -> torch.Tensor:
        return m - torch.log1p(-torch.exp(m).clamp(max=1 - 1e-6))

    ratio = log_odds(mean_logp_chosen) - log_odds(mean_logp_rejected)
    return nll_chosen + lam * -F.logsigmoid(ratio).mean(), ratio.detach()


def kto_loss(pi_desirable: torch.Tensor, ref_desirable: torch.Tensor, pi_undesirable: torch.Tensor,
             ref_undesirable: torch.Tensor, beta: float, kl_ref: torch.Tensor,
             w_desirable: float = 1.0, w_undesirable: float = 1.0) -> torch.Tensor:
    """KTO (Ethayarajh et al. 2024): desirable replies pushed above, undesirable below, the
    reference point z = max(0, KL estimate) (detached), each through a sigmoid value."""
    z = kl_ref.detach().clamp(min=0)
    gain = w_desirable * (1 - torch.sigmoid(beta * ((pi_desirable - ref_desirable) - z)))
    loss = w_undesirable * (1 - torch.sigmoid(beta * (z - (pi_undesirable - ref_undesirable))))
    return torch.cat([gain, loss]).mean()


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token KL(pi || ref) estimate k3 = exp(ref - logp) - (ref - logp) - 1 (Schulman):
    unbiased for samples from pi, and never negative."""
    d = ref_logp - logp
    return torch.exp(d) - d - 1


def clipped_policy_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
                        clip: float) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's clipped surrogate per token, -min(ratio * A, clip(ratio) * A), and whether
    the clip was active (for the clip fraction)."""
    ratio = torch.exp(logp - old_logp)
    unclipped = ratio * advantages
    clipped = ratio.clamp(1 - clip, 1 + clip) * advantages
    return -torch.minimum(unclipped, clipped), (clipped < unclipped).detach()


def clipped_value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor,
                       clip: float) -> torch.Tensor:
    """0.5 * max((v - R)^2, (v_clipped - R)^2) per token, v clipped to old +- clip."""
    v_clipped = old_values + (values - old_values).clamp(-clip, clip)
    return 0.5 * torch.maximum((values - returns) ** 2, (v_clipped - returns) ** 2)


def gae(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float,
        lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over each row's masked (reply) positions, which
    are contiguous; the value after the last reply token is 0 (the episode ends).
    Returns (advantages, returns), zero outside the mask."""
    mask = mask.to(rewards.dtype)
    adv = torch.zeros_like(rewards)
    running = torch.zeros(rewards.shape[0], dtype=rewards.dtype, device=rewards.device)
    next_value = torch.zeros_like(running)
    for t in reversed(range(rewards.shape[1])):
        m = mask[:, t]
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        running = delta + gamma * lam * running
        adv[:, t] = running * m
        # outside the reply (padding after it) nothing carries over
        running = running * m
        next_value = values[:, t] * m
    return adv, (adv + values) * mask


def group_advantages(rewards: torch.Tensor, group: int, eps: float = 1e-4) -> torch.Tensor:
    """GRPO: (r - mean of its group) / (std of its group + eps), rows grouped in runs of
    `group` samples of the same prompt. A group with one reward for all has advantage 0."""
    r = rewards.view(-1, group)
    mean = r.mean(dim=1, keepdim=True)
    std = r.std(dim=1, keepdim=True, unbiased=False) if group > 1 else torch.zeros_like(mean)
    uniform = r.amax(dim=1, keepdim=True) == r.amin(dim=1, keepdim=True)  # float rounding leaves std ~1e-8
    return torch.where(uniform, torch.zeros_like(r), (r - mean) / (std + eps)).view(-1)


def whiten(x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    mean = masked_mean(x, mask)
    var = masked_mean((x - mean) ** 2, mask)
    return (x - mean) * torch.rsqrt(var + eps) * mask
