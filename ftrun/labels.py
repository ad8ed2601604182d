"""Kept so that ``from ftrun.labels import ...`` keeps working: the labels live in ``ftrun.torchft_compat``."""
