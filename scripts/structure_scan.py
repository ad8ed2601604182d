"""The tree's size figures, measured one way for everyone (issue 44): an AST scan of a package.

Prints, for the package dir given (default ``ftrun``):

- ``dict[str, Any]``: how many times the annotation ``dict[str, Any]`` (also ``Dict[str, Any]``)
  appears in annotations (parameters, returns, annotated assignments and class fields), nested
  ones counted (``list[dict[str, Any]]`` is one);
- modules over ``--module-lines`` lines (default 500), the biggest first;
- functions over ``--function-lines`` lines (default 80; a function's lines run from its ``def``
  to its last statement, decorators not counted), the longest first.

Reads the source, imports nothing. Exit 0 (it measures; it judges nothing).
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path


def _is_dict_str_any(node: ast.AST) -> bool:
    if not isinstance(node, ast.Subscript):
        return False
    base = ast.unparse(node.value)
    if base not in ("dict", "Dict", "typing.Dict"):
        return False
    s = node.slice
    return (
        isinstance(s, ast.Tuple)
        and len(s.elts) == 2
        and ast.unparse(s.elts[0]) == "str"
        and ast.unparse(s.elts[1]) in ("Any", "typing.Any")
    )


def _annotation_text(node: ast.expr) -> ast.expr:
    """A string annotation (``"dict[str, Any]"``) parsed into its expression; others as they are."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            return ast.parse(node.value, mode="eval").body
        except SyntaxError:
            return node
    return node


def _annotations(tree: ast.AST) -> list[ast.expr]:
    out: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]:
                if arg is not None and arg.annotation is not None:
                    out.append(arg.annotation)
            if node.returns is not None:
                out.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            out.append(node.annotation)
    return [_annotation_text(a) for a in out]


def dict_str_any_count(tree: ast.AST) -> int:
    return sum(1 for ann in _annotations(tree) for n in ast.walk(ann) if _is_dict_str_any(n))


def long_functions(tree: ast.AST, limit: int) -> list[tuple[int, str]]:
    """(lines, qualified name) of every function longer than ``limit`` lines."""
    out: list[tuple[int, str]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                n = (child.end_lineno or child.lineno) - child.lineno + 1
                if n > limit:
                    out.append((n, name))
                visit(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(tree, "")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("package", nargs="?", default="ftrun", help="the package dir to scan (default: ftrun)")
    ap.add_argument("--module-lines", type=int, default=500)
    ap.add_argument("--function-lines", type=int, default=80)
    args = ap.parse_args(argv)
    root = Path(args.package)
    files = sorted(root.rglob("*.py"))
    total_lines = 0
    dict_any = 0
    modules: list[tuple[int, str]] = []
    functions: list[tuple[int, str]] = []
    longest: tuple[int, str] | None = None
    for path in files:
        text = path.read_text()
        lines = len(text.splitlines())
        total_lines += lines
        tree = ast.parse(text)
        dict_any += dict_str_any_count(tree)
        rel = path.as_posix()
        if lines > args.module_lines:
            modules.append((lines, rel))
        every = [(n, f"{rel}:{name}") for n, name in long_functions(tree, 0)]
        functions += [f for f in every if f[0] > args.function_lines]
        longest = max([*every, *([longest] if longest else [])], default=None)
    modules.sort(reverse=True)
    functions.sort(reverse=True)
    print(f"scan of {root}/: {len(files)} modules, {total_lines} lines")
    print(f"dict[str, Any] annotations: {dict_any}")
    print(f"modules over {args.module_lines} lines: {len(modules)}")
    for n, rel in modules:
        print(f"  {n:5d}  {rel}")
    print(f"functions over {args.function_lines} lines: {len(functions)}")
    for n, name in functions:
        print(f"  {n:5d}  {name}")
    print(f"longest function: {f'{longest[1]} ({longest[0]} lines)' if longest else 'none'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
