"""Task data for post-training and evaluation: Spanish arithmetic problems and reasoning-gym
sources, GSM8K files, answer extraction, chat and preference readers, repetition measures."""
