"""Training: base_model and the post-training chain, built by one factory that plans, launches torchrun through Pipes and records the consumed checkpoint."""
