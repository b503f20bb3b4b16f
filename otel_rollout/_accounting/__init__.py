"""Pure accounting: the breakdown of a trajectory, its waits, span trees, summaries,
rewards and the batch analysis. No SDK state.
"""
