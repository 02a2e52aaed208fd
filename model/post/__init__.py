"""The post-training program (`torchrun -m model.post.train`): SFT, the reward model, DPO/ORPO/KTO, PPO and GRPO, their heads, losses and replay of pretraining data."""
