"""What a stage shows a person: the filter report, loss curves and post-training curves."""
