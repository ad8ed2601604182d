"""Write docs/cli.md, the CLI reference, from the typer app itself (``ftrun.cli.app``).

    .venv/bin/python scripts/gen_cli_reference.py            # regenerate docs/cli.md
    .venv/bin/python scripts/gen_cli_reference.py --check    # exit 1, one line, when it is stale

Walks click's command tree (``typer.main.get_command``): every command, its usage, help and
examples, and every option by its --help panel with its value, default and help. Nothing is
rendered by a terminal, so the page does not depend on the terminal's width. A config field's
default comes from the config tree (its flag's own default is None: the preset or file decides).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "cli.md"
COMMAND = "python scripts/gen_cli_reference.py"

_MD_ESCAPES = str.maketrans({"<": "&lt;", ">": "&gt;", "|": "\\|", "*": "\\*", "_": "\\_", "[": "\\[", "]": "\\]"})


def _md(text: str) -> str:
    """Text as Markdown shows it literally (a table cell: no '|', no HTML, no emphasis)."""
    return text.translate(_MD_ESCAPES)


def _code(text: str) -> str:
    """Text as an inline code span (a table cell: its '|' escaped)."""
    return "`" + text.replace("|", "\\|") + "`" if text else ""


def _paragraphs(text: str | None) -> list[str]:
    return [" ".join(p.split()) for p in (text or "").replace("\b", "").split("\n\n") if p.strip()]


def _default(param: Any, command: str) -> str:
    """The default --help would show: the option's own, else (a config field) the config tree's."""
    from ftrun.config import fields

    value = param.default
    field = fields().get(param.name or "")
    if value is None and field is not None and command in field.opt.commands:
        value = field.default
    if isinstance(value, bool) and getattr(param, "secondary_opts", None):
        return param.opts[0] if value else param.secondary_opts[0]
    if value is None or value == [] or value == () or value == "" or (param.is_flag and value is False):
        return ""
    if isinstance(value, int) and not isinstance(value, bool) and value < 0:
        return ""  # a sentinel (restarts, replica_group_id): the help says what it stands for
    return str(value)


def _example(paragraph: str) -> list[str]:
    """An "Example (what): ftrun ..." paragraph as a caption and a code block."""
    label, _, command = paragraph.partition(": ")
    return [f"*{_md(label)}:*", "", "```sh", command, "```", ""]


def _command(name: str, cmd: Any, parent: Any) -> list[str]:
    from ftrun.cli_support import panel_order

    ctx = cmd.context_class(cmd, info_name=name, parent=parent)
    usage = " ".join(["ftrun", name, *cmd.collect_usage_pieces(ctx)])
    paragraphs = _paragraphs(cmd.help) + _paragraphs(cmd.epilog)
    out = [f"## ftrun {name}", "", "```text", usage, "```", ""]
    for p in paragraphs:
        if not p.startswith("Example"):
            out += [_md(p), ""]
    sections: dict[str, list[str]] = {}
    for param in cmd.get_params(ctx):
        if getattr(param, "hidden", False) or param.name == "help":
            continue
        is_arg = param.param_type_name == "argument"
        panel = getattr(param, "rich_help_panel", None) or ("Arguments" if is_arg else "Options")
        names = ", ".join([*param.opts, *getattr(param, "secondary_opts", [])]) if not is_arg else ""
        metavar = "" if getattr(param, "is_flag", False) else param.make_metavar(ctx)
        row = [_code(names or metavar), _code(metavar if names else ""), _code(_default(param, name))]
        sections.setdefault(panel, []).append("| " + " | ".join([*row, _md(param.help or "")]) + " |")
    for panel in panel_order(list(sections)):
        out += [f"### {panel}", "", "| Option | Value | Default | Help |", "| --- | --- | --- | --- |"]
        out += [*sections[panel], ""]
    for p in paragraphs:
        if p.startswith("Example"):
            out += _example(p)
    return out


def render() -> str:
    """The whole page, from the app (deterministic: the app's order, no terminal)."""
    import typer.main

    from ftrun.cli import app

    group = typer.main.get_command(app)
    root = group.context_class(group, info_name="ftrun")
    commands: dict[str, Any] = getattr(group, "commands", {})
    out = [
        "# Command-line reference",
        "",
        f"<!-- Generated from ftrun/cli.py by scripts/gen_cli_reference.py: do not edit; run `{COMMAND}`. -->",
        "",
        f"Every `ftrun` command and option, with the help `--help` prints. Generated from the CLI itself: "
        f"after changing an option, run `{COMMAND}` (CI runs it with `--check`).",
        "",
        *(_md(p) for p in _paragraphs(group.help)),
        "",
        "| Command | What it does |",
        "| --- | --- |",
    ]
    for name, cmd in commands.items():
        out.append(f"| [`ftrun {name}`](#ftrun-{name}) | {_md(cmd.short_help or _paragraphs(cmd.help)[0])} |")
    out.append("")
    for name, cmd in commands.items():
        out += _command(name, cmd, root)
    return "\n".join(out).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write the page (or with --check: exit 1 naming the stale page and the command that fixes it)."""
    ap = argparse.ArgumentParser(description="Write docs/cli.md from ftrun's typer app.")
    ap.add_argument("--check", action="store_true", help="Exit 1 when the page differs from what would be written.")
    ap.add_argument("--out", type=Path, default=PAGE, help="Where to write (default docs/cli.md).")
    args = ap.parse_args(argv)
    text = render()
    if args.check:
        current = args.out.read_text() if args.out.is_file() else None
        if current != text:
            print(f"{args.out}: stale CLI reference (run {COMMAND})", file=sys.stderr)
            return 1
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
