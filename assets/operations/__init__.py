"""Operations: the jobs, the shard sensor, the training schedule and the feedback sensor that keep the graph current."""
