"""Human feedback from the chat page: durable records (records) and the training data
made from them (preferences)."""
