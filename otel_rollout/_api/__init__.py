"""The tracing API: the tracer, trajectory and phase handles, the phase decorator, batch
scopes, the executor helpers.
"""
