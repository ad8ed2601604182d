"""``ftrun launch``'s numerics hook: the sketches of ``ftrun.worker.sketch`` on a user's own
torchft script, installed at interpreter start in every rank, the script unchanged.

* ``boot`` (torch-free, run by the ``sitecustomize`` that launch writes into the run dir and puts
  first on the groups' ``PYTHONPATH``): an import hook that patches torchft when the script
  imports it, then the ``sitecustomize`` it shadows.
* ``attach`` (in the rank, once torchft is imported): wraps ``Manager.__init__`` (its process
  group in ``SketchPG``), ``DiLoCo.__init__`` / ``__enter__`` / ``__exit__`` (the probe and the
  event log on the script's own objects) and ``LocalSGD.__init__`` (noted: not sketched).
* ``status`` (torch-free): what the hook found in each rank, and why numerics were not checked.
"""
