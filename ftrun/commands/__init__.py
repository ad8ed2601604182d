"""The orchestration of each ftrun command (one module per command; parsing lives in ftrun.cli)."""
