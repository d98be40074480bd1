"""Command line: `benchbench list | run | table | info | convert | ...`. One module per command
(`*_cmd`), the options they share (`common`), and the cached rows of `benchbench list` (`listing`).

Imports: any layer of the core; nothing below imports it.
"""

from __future__ import annotations

import argparse
import signal
import sys

from benchbench import __version__

from benchbench.runtime import threads
from benchbench.cli import (analyze_cmd, compare_cmd, convert_cmd, cost_cmd, db_cmd, device_cmd, export_cmd, history_cmd,
                            info_cmd, list_cmd, plot_cmd, profile_cmd, project_cmd, report_cmd, run_cmd, table_cmd,
                            verify_cmd, suite_cmd)
from benchbench.cli.common import check_plugin_files, plugin_options
from benchbench.errors import BenchError

COMMANDS = (list_cmd, run_cmd, table_cmd, plot_cmd, compare_cmd, verify_cmd, suite_cmd, report_cmd, info_cmd, profile_cmd, cost_cmd,
            project_cmd, device_cmd, convert_cmd, analyze_cmd, db_cmd, history_cmd, export_cmd)


class Parser(argparse.ArgumentParser):
    """argparse's parser, whose "invalid choice" (a command, a layout, a format, ...) also says the nearest
    allowed value; every subcommand's parser is one too (argparse makes them of the parent's class)."""

    def error(self, message: str):
        import re

        from benchbench.errors import did_you_mean

        bad = re.search(r"invalid choice: '(.*?)' \(choose from (.*)\)$", message)
        if bad:
            hint = did_you_mean(bad[1], re.findall(r"'([^']*)'", bad[2]))
            message += f"; did you mean '{hint}'?" if hint else ""
        super().error(message)


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="benchbench", description="Benchmark Vision Transformers against CNNs.")
    p.add_argument("--version", action="version", version=f"benchbench {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    parent = plugin_options()
    for command in COMMANDS:
        command.add_parser(sub, parent)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    p = parser()
    args, extra = p.parse_known_args(argv)
    if extra:
        _refuse_unknown(p, args.command, extra)
    args.command_line = ["benchbench", *argv]
    if callable(getattr(sys.stdout, "reconfigure", None)):  # a path that is not UTF-8 prints, its bytes escaped
        sys.stdout.reconfigure(errors="backslashreplace")
    threads.configure(args.threads)  # applied where work starts: a cell, a profile
    previous = signal.signal(signal.SIGTERM, _interrupt)  # `kill` stops any command like Ctrl-C: status 130
    try:
        check_plugin_files(args.plugin)
        return args.func(args) or 0
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)


def _refuse_unknown(p: argparse.ArgumentParser, command: str, extra: list[str]) -> None:
    """Exit 2 naming the first unknown option with the command's nearest ("--quik": did you mean
    '--quick'?), as argparse exits for other usage errors; other leftovers as argparse words them."""
    from benchbench.errors import unknown_message

    sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    options = [s for action in sub._actions for s in action.option_strings if s.startswith("--")]
    flag = next((x.split("=", 1)[0] for x in extra if x.startswith("-")), None)
    if flag is None:
        sub.error(f"unrecognized arguments: {' '.join(extra)}")
    sub.print_usage(sys.stderr)
    sub.exit(2, f"{sub.prog}: error: {unknown_message('option', flag, options, f'benchbench {command} --help')}\n")


def _interrupt(signum, frame):
    raise KeyboardInterrupt
