"""Tests of stages.reports: the filter report and the post-training report."""
