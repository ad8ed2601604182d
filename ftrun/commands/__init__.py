"""Command implementations: the orchestration behind the thin functions in ``ftrun.cli``."""
