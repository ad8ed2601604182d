"""Everything ftrun relies on inside torchft: which release is installed, its profiler labels,
its process-group API and the private attributes of its live objects. A torchft upgrade
touches this package only, and nothing else in ftrun branches on torchft's version.
Torch-free (objects come in; torchft is imported only inside the functions that need it).

One module per concept; this module re-exports their public names (``from ftrun.torchft_compat
import X`` is the import path the rest of ftrun uses). A test that replaces a function replaces it
in the module that calls it (``ftrun.torchft_compat.release.installed``), not here.

- ``labels``: torchft's profiler labels as versioned data, and ftrun's own annotations.
- ``release``: which torchft is installed (``installed``), the supported range
  (``require_supported``), what run dirs record (``versions``), each release's failed-commit
  behaviour (``release_behaviour``).
- ``backends``: the ``--backend`` process groups a release offers and why one cannot run.
- ``process_group``: the group API of either release ("configure" on 0.2.x, "reconfigure" on the
  nightly) and ``connect`` (a group without a Manager).
- ``accessors``: the private attributes of live ``DiLoCo`` / ``Manager`` objects.
- ``native``: torchft's Rust extension loaded alone (the lighthouse) and ``advertise_as``.
- ``quantized``: the quantized allreduce's call site and its wrapper.
- ``sources``: reading installed torchft/torch files without importing them.
"""

from ftrun.torchft_compat.accessors import (
    LOCAL_SGD_LOGGER,
    DiLoCoParts,
    after_each_quorum,
    diloco_fragments,
    diloco_parts,
    fragment_alpha,
    fragment_originals,
    fragment_params,
    has_quorum,
    manager_error,
    manager_process_group,
    participants,
    quorum_id,
    set_fragment_alpha,
    with_manager_pg,
)
from ftrun.torchft_compat.backends import (
    RECONFIGURE_BACKENDS,
    TORCHFT_BACKENDS,
    backend_unavailable,
    process_group_backends,
)
from ftrun.torchft_compat.labels import (
    FTRUN_STEP_PREFIX,
    FTRUN_STEP_RE,
    LABELS,
    LINK_CONTROL_QUORUM,
    LINK_HEAL,
    LINK_HOLD,
    OPTIMIZER_STEP_PREFIX,
    PROFILER_STEP_RE,
    SKETCH_WAIT,
    TORCHFT_0_2,
    LabelSet,
    ftrun_step_label,
)
from ftrun.torchft_compat.native import NATIVE, advertise_as, lighthouse_main, native_module
from ftrun.torchft_compat.process_group import configure_method, configure_quorum_id, connect, pg_api
from ftrun.torchft_compat.quantized import (
    QUANTIZED_MODULE,
    QUANTIZED_NAME,
    QUANTIZED_PARAMS,
    QUANTIZED_SOURCE,
    QuantizedSite,
    QuantizedWrap,
    quantized_site,
    quantized_site_of_source,
    wrap_quantized_allreduce,
)
from ftrun.torchft_compat.release import (
    DISTRIBUTIONS,
    SUPPORTED,
    TORCHFT_0_2_COMMITS,
    TORCHFT_NIGHTLY_COMMITS,
    Release,
    baby_pg_fails_commits,
    describe_versions,
    installed,
    pg_api_of_source,
    release_behaviour,
    require_supported,
    unsupported,
    versions,
)

__all__ = [
    "DISTRIBUTIONS",
    "FTRUN_STEP_PREFIX",
    "FTRUN_STEP_RE",
    "LABELS",
    "LINK_CONTROL_QUORUM",
    "LINK_HEAL",
    "LINK_HOLD",
    "LOCAL_SGD_LOGGER",
    "NATIVE",
    "OPTIMIZER_STEP_PREFIX",
    "PROFILER_STEP_RE",
    "QUANTIZED_MODULE",
    "QUANTIZED_NAME",
    "QUANTIZED_PARAMS",
    "QUANTIZED_SOURCE",
    "RECONFIGURE_BACKENDS",
    "SKETCH_WAIT",
    "SUPPORTED",
    "TORCHFT_0_2",
    "TORCHFT_0_2_COMMITS",
    "TORCHFT_BACKENDS",
    "TORCHFT_NIGHTLY_COMMITS",
    "DiLoCoParts",
    "LabelSet",
    "QuantizedSite",
    "QuantizedWrap",
    "Release",
    "advertise_as",
    "after_each_quorum",
    "baby_pg_fails_commits",
    "backend_unavailable",
    "configure_method",
    "configure_quorum_id",
    "connect",
    "describe_versions",
    "diloco_fragments",
    "diloco_parts",
    "fragment_alpha",
    "fragment_originals",
    "fragment_params",
    "ftrun_step_label",
    "has_quorum",
    "manager_error",
    "installed",
    "lighthouse_main",
    "manager_process_group",
    "native_module",
    "participants",
    "pg_api",
    "pg_api_of_source",
    "process_group_backends",
    "quantized_site",
    "quantized_site_of_source",
    "quorum_id",
    "release_behaviour",
    "require_supported",
    "set_fragment_alpha",
    "unsupported",
    "versions",
    "with_manager_pg",
    "wrap_quantized_allreduce",
]
