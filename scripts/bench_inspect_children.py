"""The child programs ``bench_inspect.py`` runs, each in a process of its own, so that what
one measures (peak RSS, CPU, wall) is that program's alone: ``HWM`` (the peak-RSS reader the
others end with), the analyzers (ftrun, plain ``json.load``, HTA), the CLI run and its tree's RSS,
zlib/gzip reads, and the parallel read."""

# Peak RSS: VmHWM of the child itself (ru_maxrss survives exec on Linux: it would show the parent's).
HWM = """
def hwm():
    try:
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
"""


CHILD_ANALYZE = (
    HWM
    + """
import resource, sys, time, tracemalloc
from ftrun.check.analyze import analyze
kw = dict(fragments=int(sys.argv[2]), sync_every=int(sys.argv[3]), fragment_sync_delay=int(sys.argv[4]))
rss0 = hwm()
t = time.perf_counter()
r = analyze([sys.argv[1]], **kw)
dt = time.perf_counter() - t
rss1 = hwm()
t = time.perf_counter()
analyze([sys.argv[1]], **kw)
dt2 = time.perf_counter() - t
tracemalloc.start()
analyze([sys.argv[1]], **kw)
peak = tracemalloc.get_traced_memory()[1]
print(dt, min(dt, dt2), peak, (rss1 - rss0) * 1024, r.verdict, len(r.events))
"""
)


CHILD_JSON = (
    HWM
    + """
import json, resource, sys, time
rss0 = hwm()
t = time.perf_counter()
with open(sys.argv[1]) as f:
    d = json.load(f)
dt = time.perf_counter() - t
print(dt, (hwm() - rss0) * 1024)
"""
)


CHILD_HTA = (
    HWM
    + """
import resource, sys, time, logging
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
rss0 = hwm()
t = time.perf_counter()
TraceAnalysis(trace_dir=sys.argv[1])
dt = time.perf_counter() - t
print(dt, (hwm() - rss0) * 1024)
"""
)


HTA_VERSION = (
    "from importlib import metadata\n"
    "for d in ('traceinsight', 'HolisticTraceAnalysis'):\n"
    "    try: print(d, metadata.version(d)); break\n"
    "    except metadata.PackageNotFoundError: pass\n"
)


CHILD_RUN = """
import os, resource, subprocess, sys, time


def rss_kb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            return next((int(line.split()[1]) for line in f if line.startswith("VmRSS:")), 0)
    except OSError:
        return 0


def tree(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            kids = [int(k) for k in f.read().split()]
    except OSError:
        kids = []
    return [pid] + [q for k in kids for q in tree(k)]


sample = sys.argv[1] == "rss"
t = time.perf_counter()
p = subprocess.Popen(sys.argv[2:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
peak = 0  # the process and its children (the decode child of a large trace) together, sampled every 2 ms
while sample and p.poll() is None:
    peak = max(peak, sum(map(rss_kb, tree(p.pid))))
    time.sleep(0.002)
err = p.stderr.read()
p.wait()
dt = time.perf_counter() - t
if p.returncode not in (0, 1):
    sys.exit(err.decode()[-2000:])
hwm = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(dt, max(hwm, peak) * 1024, p.returncode)
"""


CHILD_ZLIB = """
import sys, time, zlib
from ftrun.gunzip import Inflater
t = time.perf_counter()
d = zlib.decompressobj(wbits=31) if sys.argv[2] == "zlib" else Inflater()
n = 0
with open(sys.argv[1], "rb") as f:
    while b := f.read(4 << 20):
        data = b
        while data and not d.eof:
            n += len(d.decompress(data, 4 << 20))
            data = d.unconsumed_tail
print(time.perf_counter() - t, n)
"""


CHILD_GZIP = """
import gzip, shutil, sys
with open(sys.argv[1], "rb") as src, gzip.open(sys.argv[2], "wb", compresslevel=6) as dst:
    shutil.copyfileobj(src, dst, 4 << 20)
"""


CHILD_PARALLEL = """
import os, sys, time
from ftrun.check.analyze import analyze
from ftrun.trace import forked, stream
mode, path, F, H, T = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
if mode == "one":  # one process reads everything, one file after another
    stream.PARALLEL_BYTES, stream.GZ_PARALLEL_BYTES, forked.FILE_WORKERS = 1 << 62, None, 1
elif mode == "split":  # every file, plain or gzip, in two halves at once, the files in turn
    stream.PARALLEL_BYTES, stream.GZ_PARALLEL_BYTES, forked.FILE_WORKERS = 0, 0, 1
t, c = time.perf_counter(), os.times()
analyze([path], fragments=F, sync_every=H, fragment_sync_delay=T)
w, d = time.perf_counter() - t, os.times()
print(w, (d.user - c.user) + (d.system - c.system) + (d.children_user - c.children_user)
      + (d.children_system - c.children_system))
"""
