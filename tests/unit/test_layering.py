"""The package's shape (docs/architecture.md, "How it is built"): commands on top, report only renders, launch
neither renders nor analyses, and no two parts import each other, even around a loop. Every
import counts, also those inside functions. Unit test: reads the source, imports nothing."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "ftrun"


def _part(module: str) -> str | None:
    """ftrun.check.analyze -> check; ftrun.config -> config; anything else -> None."""
    parts = module.split(".")
    if parts[0] != "ftrun" or len(parts) < 2:
        return None
    return parts[1]


def import_graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(PKG.parent).with_suffix("")
        module = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        src = _part(module)
        if src is None:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = module.split(".")[: len(module.split(".")) - node.level + (rel.name == "__init__")]
                    names = [".".join(base + ([node.module] if node.module else []))]
                else:
                    names = [node.module or ""]
                names += [names[0] + "." + a.name for a in node.names]
            for name in names:
                dst = _part(name)
                if dst and dst != src and ((PKG / dst).is_dir() or (PKG / f"{dst}.py").is_file()):
                    edges.setdefault(src, set()).add(dst)
    return edges


def _reaches(edges: dict[str, set[str]], start: str, goal: str) -> bool:
    seen, todo = set(), [start]
    while todo:
        x = todo.pop()
        for y in edges.get(x, ()):
            if y == goal:
                return True
            if y not in seen:
                seen.add(y)
                todo.append(y)
    return False


def test_no_part_imports_another_around_a_loop() -> None:
    edges = import_graph()
    loops = sorted(f"{a} -> {b}" for a, bs in edges.items() for b in bs if _reaches(edges, b, a))
    assert not loops, loops


def test_the_layers() -> None:
    edges = import_graph()
    assert {p for p, dst in edges.items() if "commands" in dst} <= {"cli", "entry", "api"}, (
        "only the front doors (CLI, its console-script entry, Python API) call commands"
    )
    assert {p for p, dst in edges.items() if "api" in dst} <= {"pytest_plugin"}, (
        "the API is the top: only the pytest plugin uses it"
    )
    assert edges.get("pytest_plugin", set()) <= {"api"}, "the pytest plugin goes through the public API"
    assert not edges.get("report", set()) & {"launch", "worker", "commands"}, "report only renders"
    assert not edges.get("launch", set()) & {"report", "check", "commands"}, "launch neither renders nor analyses"
    assert not edges.get("trace", set()) & {"check", "report", "launch", "worker", "commands"}
    assert {p for p, dst in edges.items() if "sweep" in dst} <= {"commands"}, "sweep's work is below its command"
    assert not edges.get("sweep", set()) & {"commands", "report", "worker"}, (
        "sweep runs cells (trainings in children) and checks them; its command renders"
    )
    assert {p for p, dst in edges.items() if "comparison" in dst} <= {"commands", "api", "sweep"}, (
        "compare's work is below its command (the Python API's compare runs it too; sweep's --preset tau "
        "takes its default link)"
    )
    assert not edges.get("comparison", set()) & {"commands", "worker"}, (
        "compare trains through the training its front door gives it, checks and records; its command renders"
    )
    assert {p for p, dst in edges.items() if "plan" in dst} <= {"commands", "report"}, (
        "plan's work is below its command (report renders its records)"
    )
    assert not edges.get("plan", set()) & {"commands", "report", "worker", "launch"}, (
        "plan models, reads run dirs and checks; its command renders"
    )


def test_the_graph_sees_imports_inside_functions() -> None:
    edges = import_graph()
    assert "check" in edges["commands"]  # commands/inspect_trace imports check.analyze at the top
    assert "report" in edges["commands"]  # ... and report only inside its function
