"""Yunque: train a language model from scratch as a graph of Dagster assets."""

__version__ = "0.1.0"
