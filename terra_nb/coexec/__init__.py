"""Stage 3, co-execution: the PythonRunner answering ops with placeholders, plans made from the
TraceGraph (a straight-line segment, or the whole program), their lowering to TensorFlow graphs,
and the GraphRunner that issues them into TensorFlow's asynchronous executor.
"""
