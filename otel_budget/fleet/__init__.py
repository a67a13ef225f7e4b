"""Budgets shared by processes: the Redis store and its scripts, run trees across processes."""
