"""The agent's frame-read method names answer what torch elastic's ``inspect.stack()`` ones do."""

from __future__ import annotations

import importlib

from ftrun.worker import agent


def test_method_name_matches_torch_elastic_get_method_name() -> None:
    dr = importlib.import_module("torch.distributed.elastic.rendezvous.dynamic_rendezvous")
    original = dr.get_method_name
    if original is agent.method_name:  # patched earlier in this process
        original = importlib.reload(dr).get_method_name

    class Handler:
        def _record(self, name_of):  # the shape of torch's callers: a method asks for its caller's name
            return name_of()

        def shutdown(self, name_of):
            return self._record(name_of)

    h = Handler()
    assert h.shutdown(agent.method_name) == h.shutdown(original) == "shutdown"
    for depth in (1, 2, 3):  # (0: each its own name)
        assert agent.method_name(depth) == original(depth)
    assert agent.method_name(10_000) == original(10_000) == "no_method_name"


def test_cheap_rendezvous_names_replaces_torch_elastic_s() -> None:
    dr = importlib.import_module("torch.distributed.elastic.rendezvous.dynamic_rendezvous")
    saved = dr.get_method_name
    try:
        agent.cheap_rendezvous_names()
        assert dr.get_method_name is agent.method_name
    finally:
        dr.get_method_name = saved
