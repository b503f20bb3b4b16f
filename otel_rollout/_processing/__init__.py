"""Span processors: the breakdown processor, histograms, tail keep, sampling, loop stalls,
GenAI metrics.
"""
