"""PyTorch side of Yunque (model, training, generation): added by the training issues."""
