"""Export: the guarded batch export, loss counts, the trace file and
the console.
"""
