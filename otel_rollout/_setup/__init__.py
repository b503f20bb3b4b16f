"""Configuration: configure(), the pipelines, the resource and the Rollout handle (the top
layer).
"""
