"""The man pages, made from the program itself so that they cannot drift from it:

    python3 scripts/manpage.py rebal                      > rebal.1       (every command's own --help)
    python3 scripts/manpage.py config config.example.toml > rebal.toml.5  (the example config's comments)
"""

from __future__ import annotations

import re
import sys
from datetime import date

SEE_ALSO = ".SH SEE ALSO\n.BR rebal (1),\n.BR rebal.toml (5),\n.BR zpool (8),\n.BR zfs (8),\n.BR systemd.timer (5)\n"


def esc(text: str) -> str:
    """Text for roff: backslashes and leading dots and quotes made harmless."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return "\n".join(("\\&" + ln) if ln.startswith((".", "'")) else ln for ln in text.splitlines())


def header(name: str, section: int, what: str) -> str:
    from rebal import __version__

    return (f'.TH {name.upper()} {section} "{date.today():%Y-%m-%d}" "rebal {__version__}" "{what}"\n')


def rebal_page() -> str:
    from typer.main import get_command

    from rebal.cli.app import build

    root = get_command(build())
    ctx = root.context_class(root, info_name="rebal")
    out = [header("rebal", 1, "rebal manual"),
           ".SH NAME\nrebal \\- keep a ZFS pool's data evenly spread over its vdevs, and backed up\n",
           ".SH SYNOPSIS\n.B rebal\n[\\fIGLOBAL OPTIONS\\fR] \\fICOMMAND\\fR [\\fIARGS\\fR]...\n",
           ".SH DESCRIPTION\n" + esc(root.help or "") + "\n",
           ".SH GLOBAL OPTIONS\n" + options(root, ctx)]
    out.append(".SH COMMANDS\n")
    for name, cmd in commands(root, ctx):
        sub = cmd.context_class(cmd, info_name=name, parent=ctx)
        usage = " ".join(cmd.collect_usage_pieces(sub))
        out.append(f".SS {esc(name)}\n.B rebal {esc(name)}\n{esc(usage)}\n.PP\n{esc(cmd.help or '')}\n")
        out.append(options(cmd, sub))
    out.append(".SH EXIT STATUS\n" + esc(exit_codes()) + "\n")
    out.append(".SH FILES\n.TP\n.I /etc/rebal/config.toml\nthe configuration, see\n.BR rebal.toml (5)\n"
               ".TP\n.I /var/lib/rebal/state.db\nthe state database: runs, journal, resume tokens, fill history\n"
               ".TP\n.I /usr/share/doc/rebal/\nthe manual (README.md and docs/)\n")
    out.append(SEE_ALSO)
    return "".join(out)


def commands(group, ctx):
    """(name, command) of every command below ``group``, "config check" for a command of a group."""
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        if hasattr(cmd, "list_commands"):
            sub = cmd.context_class(cmd, info_name=name, parent=ctx)
            for n2, c2 in commands(cmd, sub):
                yield f"{name} {n2}", c2
        else:
            yield name, cmd


def options(cmd, ctx) -> str:
    """The command's options as a roff list, as its --help gives them (its arguments are in its usage)."""
    out = []
    for p in cmd.get_params(ctx):
        if getattr(p, "param_type_name", "") != "option" or getattr(p, "hidden", False):
            continue
        rec = p.get_help_record(ctx)
        if rec:
            out.append(f".TP\n.B {esc(rec[0])}\n{esc(rec[1])}\n")
    return "".join(out)


def exit_codes() -> str:
    """The README's table of exit codes, as it stands."""
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    m = re.search(r"^Exit codes:.*?(?=\n\n)", readme, re.M | re.S)
    return " ".join(m.group(0).split()) if m else ""


def config_page(example: str) -> str:
    """rebal.toml(5): each table of the example config with its keys, each key with the comment above it."""
    out = [header("rebal.toml", 5, "rebal manual"),
           ".SH NAME\nrebal.toml \\- the configuration of rebal\n",
           ".SH DESCRIPTION\n" + esc("rebal reads /etc/rebal/config.toml (or the file --config or $REBAL_CONFIG "
                                     "names). TOML; every key is optional and shows its default below unless "
                                     "it says example. `rebal config check` names every problem with its key "
                                     "and the file.") + "\n"]
    comment: list[str] = []
    for raw in open(example).read().splitlines():
        line = raw.strip()
        if line.startswith("#:"):
            line = line[2:].strip()  # the example job, commented out in the file
        elif line.startswith("#"):
            comment.append(line.lstrip("#").strip())
            continue
        if not line:
            comment = []
            continue
        if line.startswith("["):
            out.append(f".SH {esc(line)}\n" + (esc(" ".join(comment)) + "\n" if comment else ""))
        else:
            key, _, value = line.partition("=")
            out.append(f".TP\n.B {esc(key.strip())}\n\\(em {esc(value.strip())}\n.br\n{esc(' '.join(comment))}\n")
        comment = []
    out.append(SEE_ALSO)
    return "".join(out)


def main() -> int:
    if sys.argv[1:2] == ["rebal"]:
        sys.stdout.write(rebal_page())
    elif sys.argv[1:2] == ["config"] and len(sys.argv) == 3:
        sys.stdout.write(config_page(sys.argv[2]))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
