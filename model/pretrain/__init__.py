"""The pretraining program (`torchrun -m model.pretrain.train`): its data loader and mixtures, early stopping, and the plan printed before launch."""
