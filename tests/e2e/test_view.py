"""``ftrun view`` for real: TensorBoard + torch-tb-profiler on a tiny run, over HTTP and in Chromium.

One small training run (2 replicas, 20 steps, all profiled) and one ``ftrun view RUN --port 0``
for the module. The tests read the URL it prints, then

* ask the profiler plugin's data routes for the run, its views and its workers, render the
  Overview data of every worker, and check the scalars are there too;
* drive headless Chromium through chromedriver's WebDriver HTTP API (no selenium needed): open
  the plugin page, read the run/view/worker selects inside the plugin's iframe, open the
  Workers dropdown and check it lists every ``replica{r}_rank{g}``, pick another worker
  (skipped when Chromium or chromedriver is not installed);
* SIGINT the view and check it, TensorBoard and TensorBoard's children are gone within 5 s
  and its temp logdir is removed.

Offline note: the plugin's Overview charts load Google Charts from www.gstatic.com, so without
internet the main panel keeps spinning; the sidebar (runs, views, workers) renders regardless.
"""

from __future__ import annotations

import base64
import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from ftrun import layout
from ftrun.launch.procs import descendants, spawn, stop_tree
from train_fixtures import FTRUN, SMALL, _cmdline, _stat, live, one_line, run_ftrun

pytestmark = pytest.mark.e2e  # every test here starts processes (or uses a fixture that trains)

RUN = "viewrun"
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never via a proxy
URL_RE = re.compile(r"^view: (http://127\.0\.0\.1:(\d+)/)#pytorch_profiler$")
PLUGIN = "data/plugin/pytorch_profiler"
CHROMIUM = next((p for p in (shutil.which("chromium"), "/usr/bin/chromium") if p and os.access(p, os.X_OK)), None)
CHROMEDRIVER = next(
    (p for p in (shutil.which("chromedriver"), "/usr/bin/chromedriver") if p and os.access(p, os.X_OK)), None
)
ELEMENT = "element-6066-11e4-a52e-4f735466cecf"  # W3C WebDriver element reference key


def get(url: str, timeout: float = 10.0) -> tuple[int, bytes]:
    try:
        with DIRECT.open(url, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def get_json(url: str):
    status, body = get(url)
    assert status == 200, f"GET {url}: {status} {body[:300]!r}"
    return json.loads(body)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("view")
    cmd = [
        *FTRUN,
        "train",
        "--steps",
        "20",
        "--profile",
        "1:20",
        "--sync-every",
        "10",
        "--fragment-sync-delay",
        "2",
        *SMALL,
        "--out",
        str(out),
        "--run-name",
        RUN,
    ]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    if res.returncode != 0:
        pytest.fail(f"ftrun train failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}")
    return out / RUN


@pytest.fixture(scope="module")
def workers(run_dir) -> list[str]:
    names = sorted(
        layout.worker_name(t["replica"], t["rank"])
        for t in json.loads((run_dir / layout.MANIFEST).read_text())["traces"]
    )
    assert names == ["replica0_rank0", "replica1_rank0"]
    return names


class Viewer:
    def __init__(self, run_dir: Path, tmp: Path) -> None:
        self.err_path = tmp / "view.stderr"
        self.proc = subprocess.Popen(
            [*FTRUN, "view", str(run_dir), "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=open(self.err_path, "wb"),
            text=True,
        )
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [lines.put(ln) for ln in self.proc.stdout], daemon=True).start()
        try:
            self.line = lines.get(timeout=120).rstrip("\n")
        except queue.Empty:
            self.stop()
            pytest.fail(f"ftrun view printed no URL in 120 s; stderr:\n{self.stderr()}")
        m = URL_RE.match(self.line)
        assert m, f"unexpected first line {self.line!r}; stderr:\n{self.stderr()}"
        self.base, self.port = m[1], int(m[2])
        self.url = self.line.split(" ", 1)[1]

    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace")

    def tensorboard(self) -> int:
        kids = [p for p in descendants(self.proc.pid) if "tensorboard.main" in _cmdline(p)]
        assert len(kids) == 1, kids
        return kids[0]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                stop_tree(self.proc)


@pytest.fixture(scope="module")
def viewer(run_dir, tmp_path_factory):
    v = Viewer(run_dir, tmp_path_factory.mktemp("viewer"))
    yield v
    v.stop()


def wait_loaded(v: Viewer, timeout: float = 150.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        runs = get_json(v.base + PLUGIN + "/runs")
        if RUN in runs["runs"] and not runs["loading"]:
            return runs
        assert time.monotonic() < deadline, f"profiler plugin did not load {RUN!r} in {timeout:.0f} s: {runs}"
        time.sleep(0.5)


def listening_addrs(port: int) -> set[str]:
    """Local addresses LISTENing on ``port`` (from /proc/net/tcp{,6}, hex)."""
    out = set()
    for f in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(f).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            local, state = row.split()[1], row.split()[3]
            addr, p = local.split(":")
            if state == "0A" and int(p, 16) == port:
                out.add(addr)
    return out


def test_plugin_lists_every_worker_and_renders_overview(viewer, workers):
    assert listening_addrs(viewer.port) == {"0100007F"}, "TensorBoard must listen on 127.0.0.1 only"
    runs = wait_loaded(viewer)
    assert runs["runs"] == [RUN], runs  # one profiler run, named after the run dir

    def q(**kw) -> str:
        return "?" + urllib.parse.urlencode(kw)

    views = get_json(viewer.base + PLUGIN + "/views" + q(run=RUN))
    assert "Overview" in views and "Trace" in views, views
    assert get_json(viewer.base + PLUGIN + "/workers" + q(run=RUN, view="Overview")) == workers
    for w in workers:
        spans = get_json(viewer.base + PLUGIN + "/spans" + q(run=RUN, worker=w))
        assert spans == ["1"], spans  # one window, first profiled step 1
        ov = get_json(viewer.base + PLUGIN + "/overview" + q(run=RUN, worker=w, span=spans[0]))
        assert ov["steps"]["rows"], f"{w}: overview has no step rows"
        assert {"title": "Number of Worker(s)", "value": str(len(workers))} in ov["environments"], ov["environments"]
    # the scalars of every replica group, as runs next to the profiler run
    scalar_runs = get_json(viewer.base + "data/runs")
    assert sorted(scalar_runs) == [f"{RUN}/replica0", f"{RUN}/replica1"], scalar_runs
    tags = get_json(viewer.base + "data/plugin/scalars/tags")
    for r in scalar_runs:
        assert "loss" in tags[r], tags


class WebDriver:
    """The few W3C WebDriver calls we need, straight over HTTP to chromedriver."""

    def __init__(self, tmp: Path) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.profile = tmp / "chromium-profile"
        self.profile.mkdir()
        self.log = open(tmp / "chromedriver.log", "wb")
        self.proc = spawn([CHROMEDRIVER, f"--port={port}"], dict(os.environ), self.log)
        self.base = f"http://127.0.0.1:{port}"
        self.sid = None
        deadline = time.monotonic() + 30
        while True:
            try:
                self._call("GET", "/status")
                break
            except OSError:
                assert time.monotonic() < deadline, "chromedriver did not start"
                time.sleep(0.1)
        args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-quic",
            "--window-size=1400,900",
            f"--user-data-dir={self.profile}",
        ]
        caps = {
            "capabilities": {
                "alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": {"binary": CHROMIUM, "args": args}}
            }
        }
        self.sid = self._call("POST", "/session", caps)["sessionId"]

    def _call(self, method: str, path: str, body=None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(
            self.base + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with DIRECT.open(req, timeout=60) as r:
                return json.loads(r.read())["value"]
        except urllib.error.HTTPError as e:
            raise AssertionError(f"WebDriver {method} {path}: {e.code} {e.read()[:500]!r}") from None

    def __call__(self, method: str, path: str, body=None):
        return self._call(method, f"/session/{self.sid}{path}", body)

    def find_all(self, css: str) -> list[str]:
        return [e[ELEMENT] for e in self("POST", "/elements", {"using": "css selector", "value": css})]

    def wait_all(self, css: str, n: int, timeout: float = 60.0) -> list[str]:
        deadline = time.monotonic() + timeout
        while True:
            found = self.find_all(css)
            if len(found) >= n:
                return found
            assert time.monotonic() < deadline, f"fewer than {n} elements {css!r} after {timeout:.0f} s"
            time.sleep(0.2)

    def text(self, el: str) -> str:
        return self("GET", f"/element/{el}/text")

    def click(self, el: str) -> None:
        self("POST", f"/element/{el}/click", {})

    def screenshot(self, path: Path) -> None:
        path.write_bytes(base64.b64decode(self("GET", "/screenshot")))

    def close(self) -> None:
        try:
            if self.sid:
                self._call("DELETE", f"/session/{self.sid}")
        except (AssertionError, OSError):
            pass
        stop_tree(self.proc)
        self.log.close()
        # Chromium's crashpad handlers re-parent to init; they name our profile dir in their argv.
        for pid in (int(d) for d in os.listdir("/proc") if d.isdigit()):
            if str(self.profile) in _cmdline(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


def select_texts(wd: WebDriver) -> list[str]:
    return [wd.text(e) for e in wd.find_all("[aria-haspopup=listbox]")]


@pytest.mark.skipif(
    not (CHROMIUM and CHROMEDRIVER),
    reason="Chromium/chromedriver not installed (Debian: apt-get install chromium chromium-driver)",
)
def test_browser_lists_workers(viewer, workers, tmp_path):
    wait_loaded(viewer)
    wd = WebDriver(tmp_path)
    try:
        wd("POST", "/url", {"url": viewer.url})
        frame = wd.wait_all("iframe", 1)[0]  # TensorBoard hosts the plugin's React app in an iframe
        wd("POST", "/frame", {"id": {ELEMENT: frame}})
        deadline = time.monotonic() + 60
        while (texts := select_texts(wd))[:3] != [RUN, "Overview", workers[0]]:
            assert time.monotonic() < deadline, f"plugin sidebar shows {texts}, want run {RUN}, Overview, {workers[0]}"
            time.sleep(0.3)
        wd.click(wd.find_all("[aria-haspopup=listbox]")[2])  # the Workers dropdown
        deadline = time.monotonic() + 30
        while True:  # the menu fades in: options exist before their text is visible
            options = wd.wait_all("[role=option]", len(workers))
            if (shown := [wd.text(o) for o in options]) == workers:
                break
            assert time.monotonic() < deadline, f"Workers dropdown shows {shown}, want {workers}"
            time.sleep(0.2)
        wd.click(options[-1])
        deadline = time.monotonic() + 30
        while select_texts(wd)[2] != workers[-1]:
            assert time.monotonic() < deadline, f"picking {workers[-1]} left the select at {select_texts(wd)}"
            time.sleep(0.2)
        wd("POST", "/frame/parent", {})
        wd.screenshot(tmp_path / "view.png")
    except BaseException:
        try:
            wd.screenshot(tmp_path / "failed.png")
        except Exception:
            pass
        raise
    finally:
        wd.close()


def test_sigint_stops_view_and_tensorboard(viewer):
    assert viewer.proc.poll() is None, f"ftrun view died early; stderr:\n{viewer.stderr()}"
    tb = viewer.tensorboard()
    logdir = _cmdline(tb).split("--logdir ", 1)[1].split(" ", 1)[0]
    assert Path(logdir).is_dir() and Path(logdir).name == "logdir"
    tree = {p: _stat(p) for p in [viewer.proc.pid, *descendants(viewer.proc.pid)]}
    tree = {p: st[2] for p, st in tree.items() if st}
    t0 = time.monotonic()
    viewer.proc.send_signal(signal.SIGINT)
    code = viewer.proc.wait(timeout=5)
    while any(live(p, s) for p, s in tree.items()) and time.monotonic() - t0 < 5:
        time.sleep(0.05)
    left = {p: _cmdline(p) for p, s in tree.items() if live(p, s)}
    assert not left, f"still running 5 s after SIGINT: {left}"
    assert code == 130, viewer.stderr()  # stopped by an interrupt: 130, as every ftrun command
    assert "view: stopped by SIGINT" in viewer.stderr()
    assert not Path(logdir).parent.exists(), "temp logdir left behind"
    assert "Traceback" not in viewer.stderr()


def test_bad_input_is_one_line_exit_2(run_dir, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    no_traces = tmp_path / "no-traces"
    (no_traces / layout.TRACES).mkdir(parents=True)
    (no_traces / layout.MANIFEST).write_text("{}")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        cases = {
            "missing": ([str(tmp_path / "nope")], "no such directory"),
            "file": ([str(run_dir / layout.MANIFEST)], "not a directory"),
            "not a run dir": ([str(empty)], "not an ftrun run dir"),
            "no traces": ([str(no_traces)], "no traces"),
            "port in use": ([str(run_dir), "--port", str(port)], "in use"),
            "bad port": ([str(run_dir), "--port", "70000"], "--port 70000"),
        }
        for label, (args, want) in cases.items():
            res = run_ftrun("view", *args)
            one_line(res, want)
            assert not res.stdout, (label, res.stdout)
