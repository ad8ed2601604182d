"""Checking traces against the expected streaming-DiLoCo schedule (``ftrun inspect-trace``)."""
