"""Kept so that ``from ftrun.labels import ...`` keeps working: the labels live in ``ftrun.torchft_compat``."""

from ftrun.torchft_compat import FTRUN_STEP_PREFIX, FTRUN_STEP_RE, LABELS, LINK_CONTROL_QUORUM, LINK_HOLD, PROFILER_STEP_RE, LabelSet, ftrun_step_label  # noqa: F401
