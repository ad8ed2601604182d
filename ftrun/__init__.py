"""ftrun: a training harness with profiling for torchft (streaming) DiLoCo.

Pipeline: config -> launch -> worker -> trace -> check -> report. Importing this package
never imports torch; only ``ftrun.worker`` does, inside the training processes.
"""

__version__ = "0.1.0"

import os as _os
import sys as _sys

if _os.path.basename(_sys.argv[0] if _sys.argv else "") == "ftrun":  # the CLI, not a worker
    from ftrun.errors import exit_on_signal as _exit_on_signal

    _exit_on_signal()  # a Ctrl-C while the CLI is still importing: one line, exit 130
