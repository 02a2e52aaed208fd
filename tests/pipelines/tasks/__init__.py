"""Tests of pipelines.tasks: math, chat and preference data, domain question-answer pairs."""
