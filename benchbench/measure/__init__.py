"""Measurements taken on every cell: parameters, forward MACs, device time."""
