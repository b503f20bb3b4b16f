"""The settings table, the kinds of value, resolution: the bottom layer, which every layer
may read.
"""
