"""ftrun: a training harness with profiling for torchft (streaming) DiLoCo.

Pipeline: config -> launch -> worker -> trace -> check -> report. Importing this package
never imports torch; only ``ftrun.worker`` does, inside the training processes.
"""

__version__ = "0.1.0"
