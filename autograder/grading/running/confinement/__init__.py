"""Keeping a notebook confined: its sandbox, limits, time budget, processes and environment."""
