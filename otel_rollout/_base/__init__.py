"""Small shared helpers every upper layer may use: internal errors, value coercion, fork
resets, bounded calls, the GenAI conventions, the per-trace span buffer.
"""
