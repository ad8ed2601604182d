"""ftrun.worker.malloc: a rank fixes glibc's malloc thresholds, unless the user set them."""

from __future__ import annotations

import platform

import pytest

from ftrun.worker import malloc


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_thresholds_are_fixed_on_glibc(monkeypatch):
    for var in ("GLIBC_TUNABLES", *malloc.USER_VARIABLES):
        monkeypatch.delenv(var, raising=False)
    assert malloc.fix_malloc_thresholds() is True


@pytest.mark.parametrize(
    "var, value",
    [
        ("GLIBC_TUNABLES", "glibc.malloc.mmap_threshold=65536"),
        ("GLIBC_TUNABLES", "glibc.malloc.arena_max=2:glibc.malloc.trim_threshold=1"),
        ("MALLOC_MMAP_THRESHOLD_", "65536"),
        ("MALLOC_TRIM_THRESHOLD_", "0"),
    ],
)
def test_a_users_threshold_wins(monkeypatch, var, value):
    monkeypatch.setenv(var, value)
    assert malloc.fix_malloc_thresholds() is False


def test_another_tunable_does_not_stop_it(monkeypatch):
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=2")
    for var in malloc.USER_VARIABLES:
        monkeypatch.delenv(var, raising=False)
    calls = []

    class Libc:
        def mallopt(self, param, value):
            calls.append((param, value))
            return 1

    monkeypatch.setattr(malloc.ctypes, "CDLL", lambda name: Libc())
    assert malloc.fix_malloc_thresholds() is True
    assert calls == [
        (malloc.M_MMAP_THRESHOLD, malloc.MMAP_THRESHOLD),
        (malloc.M_TRIM_THRESHOLD, malloc.TRIM_THRESHOLD),
    ]
