"""Export: the guarded batch export, loss counts, the release buffer, the trace file and
the console.
"""
