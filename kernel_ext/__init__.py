"""The IPython side of terra-nb: notebook execution helpers (and, later, the %%terra magics).

``python -m kernel_ext.run_notebook NOTEBOOK`` executes a notebook headless in a real kernel.
"""
