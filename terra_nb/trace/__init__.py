"""Stage 2, plain data: one iteration's trace, traces merged into the TraceGraph, and printing it.

Nothing here imports TensorFlow: a TraceGraph can be saved, loaded and drawn anywhere.
"""
