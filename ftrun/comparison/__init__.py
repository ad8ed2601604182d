"""A compare's work below its command (``ftrun.commands.compare`` calls and renders).
Torch-free: each training runs in child processes. Named ``comparison``: a subpackage
``ftrun.compare`` would shadow the Python API's ``ftrun.compare`` once imported.

- ``specs``: what compare is given (presets or config files to train, run dirs to read), the
  settings both trained runs share, and each configuration's run dirs;
- ``link``: the default link, calibrated where compare runs (``ftrun sweep --preset tau`` takes it too);
- ``modes``: train both configurations (``--repeat``, alternating, one link) or read two runs;
- ``outputs``: every run checked and measured, and the compare dir's report.json, report.md and
  timeline.png;
- ``run``: the pipeline, options to result (``run_compare``).
"""
