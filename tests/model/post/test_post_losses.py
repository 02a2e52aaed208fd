"""Each post-training objective on small tensors whose values were worked out by hand."""

import math

import pytest
import torch

from model.post.losses import (
    bradley_terry_loss,
    clipped_policy_loss,
    clipped_value_loss,
    dpo_loss,
    gae,
    group_advantages,
    kl_k3,
    kto_loss,
    masked_mean,
    orpo_loss,
    sft_loss,
    token_logprobs,
    whiten,
)

t = torch.tensor


def test_bradley_terry():
    # -log sigmoid(1) = 0.313262, -log sigmoid(0) = log 2 = 0.693147
    assert bradley_terry_loss(t([2.0, 0.0]), t([1.0, 0.0])).item() == pytest.approx((0.313262 + 0.693147) / 2, abs=1e-6)


def test_dpo_loss_and_implicit_rewards():
    loss, r_c, r_r = dpo_loss(t([-1.0]), t([-3.0]), t([-2.0]), t([-2.0]), beta=0.5)
    assert r_c.item() == pytest.approx(0.5) and r_r.item() == pytest.approx(-0.5)
    assert loss.item() == pytest.approx(0.313262, abs=1e-6)  # -log sigmoid(0.5 - (-0.5))
    # policy equal to the reference: no preference yet, loss log 2
    assert dpo_loss(t([-1.0]), t([-3.0]), t([-1.0]), t([-3.0]), beta=0.1)[0].item() == pytest.approx(math.log(2))


def test_orpo_loss():
    # odds(0.5) = 1 -> log 0; odds(0.2) = 0.25 -> log -1.386294; -log sigmoid(1.386294) = -log 0.8
    loss, ratio = orpo_loss(t([math.log(0.5)]), t([math.log(0.2)]), t(2.0), lam=0.1)
    assert ratio.item() == pytest.approx(math.log(4), abs=1e-5)
    assert loss.item() == pytest.approx(2.0 + 0.1 * -math.log(0.8), abs=1e-5)


def test_kto_loss():
    # z = 0.5: desirable 1 - sigmoid(1.5 - 0.5), undesirable 1 - sigmoid(0.5 - (-0.5)): both 0.268941
    loss = kto_loss(t([1.5]), t([0.0]), t([-0.5]), t([0.0]), beta=1.0, kl_ref=t(0.5))
    assert loss.item() == pytest.approx(0.268941, abs=1e-6)
    # a negative KL estimate is clamped to 0: 1 - sigmoid(1.5) and 1 - sigmoid(0.5)
    loss = kto_loss(t([1.5]), t([0.0]), t([-0.5]), t([0.0]), beta=1.0, kl_ref=t(-1.0))
    assert loss.item() == pytest.approx((0.182426 + 0.377541) / 2, abs=1e-6)


def test_ppo_clipped_surrogate():
    logp = torch.log(t([1.5, 1.5, 0.5, 1.1]))
    adv = t([1.0, -1.0, -1.0, 1.0])
    loss, clipped = clipped_policy_loss(logp, torch.zeros(4), adv, clip=0.2)
    # ratio 1.5, A>0: min(1.5, 1.2) = 1.2; A<0: min(-1.5, -1.2) = -1.5; ratio 0.5, A<0: min(-0.5, -0.8) = -0.8;
    # ratio 1.1 inside the clip: 1.1
    assert loss.tolist() == pytest.approx([-1.2, 1.5, 0.8, -1.1], abs=1e-6)
    assert clipped.tolist() == [True, False, True, False]


def test_clipped_value_loss():
    # v moves from 1.0 to 2.0 with returns 3.0 and clip 0.5: clipped v = 1.5;
    # max((2-3)^2, (1.5-3)^2) / 2 = 2.25 / 2
    assert clipped_value_loss(t([2.0]), t([1.0]), t([3.0]), 0.5).item() == pytest.approx(1.125)


def test_gae_by_hand():
    mask = t([[0, 1, 1, 1], [0, 1, 1, 0]]).bool()
    rewards = t([[0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 1.0, 5.0]])  # 5.0 sits in padding: must not leak
    values = t([[5.0, 0.5, 0.6, 0.7], [0.0, 0.2, 0.4, 9.0]])
    adv, ret = gae(rewards, values, mask, gamma=1.0, lam=0.5)
    # row 0: A3 = 1 - 0.7 = 0.3; A2 = (0.7 - 0.6) + 0.5 * 0.3 = 0.25; A1 = (0.6 - 0.5) + 0.5 * 0.25 = 0.225
    # row 1: A2 = 1 - 0.4 = 0.6; A1 = (0.4 - 0.2) + 0.5 * 0.6 = 0.5
    assert adv.tolist()[0] == pytest.approx([0.0, 0.225, 0.25, 0.3], abs=1e-6)
    assert adv.tolist()[1] == pytest.approx([0.0, 0.5, 0.6, 0.0], abs=1e-6)
    assert ret.tolist()[0] == pytest.approx([0.0, 0.725, 0.85, 1.0], abs=1e-6)


def test_gae_discount():
    adv, _ = gae(t([[0.0, 2.0]]), t([[0.0, 0.0]]), t([[1, 1]]).bool(), gamma=0.5, lam=1.0)
    assert adv.tolist()[0] == pytest.approx([1.0, 2.0])  # 0 + 0.5 * 2


def test_group_advantages():
    adv = group_advantages(t([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0]), group=4)
    std = math.sqrt(0.25 * 0.75) + 1e-4  # population std of one 1 and three 0s, plus eps
    assert adv[:4].tolist() == pytest.approx([0.75 / std, -0.25 / std, -0.25 / std, -0.25 / std], abs=1e-5)
    assert adv[4:].tolist() == [0.0] * 4  # one reward for the whole group: no signal
    # eight samples all worth 0.1: float32 leaves a std of ~1e-8, which must not become a signal
    assert group_advantages(torch.full((8,), 0.1), group=8).abs().max().item() == 0.0


def test_k3_values_and_unbiasedness():
    assert kl_k3(t([math.log(0.5)]), t([math.log(0.25)])).item() == pytest.approx(0.5 + math.log(2) - 1, abs=1e-6)
    assert kl_k3(t([-1.3]), t([-1.3])).item() == 0.0
    # for samples from pi the mean of k3 is KL(pi || ref)
    pi, ref = t([0.6, 0.3, 0.1]), t([0.2, 0.5, 0.3])
    g = torch.Generator().manual_seed(0)
    x = torch.multinomial(pi, 200_000, replacement=True, generator=g)
    estimate = kl_k3(pi.log()[x], ref.log()[x]).mean().item()
    exact = (pi * (pi / ref).log()).sum().item()
    assert estimate == pytest.approx(exact, rel=0.02)
    assert (kl_k3(torch.randn(100), torch.randn(100)) >= 0).all()


def test_token_logprobs_and_sft_loss_ignore_untrained():
    logits = torch.log(t([[[0.5, 0.25, 0.25], [0.1, 0.8, 0.1]]]))
    targets = t([[0, -100]])
    assert token_logprobs(logits, targets).tolist()[0] == pytest.approx([math.log(0.5), 0.0])
    assert sft_loss(logits, targets).item() == pytest.approx(-math.log(0.5))
    assert sft_loss(logits, t([[0, 1]])).item() == pytest.approx(-(math.log(0.5) + math.log(0.8)) / 2)


def test_masked_mean_and_whiten():
    x, m = t([[1.0, 2.0, 100.0]]), t([[1, 1, 0]]).bool()
    assert masked_mean(x, m).item() == 1.5
    w = whiten(x, m)
    assert w.tolist()[0] == pytest.approx([-1.0, 1.0, 0.0], abs=1e-4)
