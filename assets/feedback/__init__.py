"""Feedback: human_preferences, the chat page's ratings as training data. It sits below
training, whose alignment stages read it; the job and sensor that carry new ratings to a
model are operations (`assets.operations.feedback`)."""
