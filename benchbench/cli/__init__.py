"""Command line: `benchbench list | run | table | info | convert | ...`. One module per command."""

from __future__ import annotations

import argparse
import signal
import sys

from benchbench import __version__, threads
from benchbench.cli import (analyze_cmd, compare_cmd, convert_cmd, cost_cmd, db_cmd, device_cmd, export_cmd, history_cmd,
                            info_cmd, list_cmd, plot_cmd, profile_cmd, report_cmd, run_cmd, table_cmd, verify_cmd)
from benchbench.cli.common import check_plugin_files, plugin_options
from benchbench.errors import BenchError

COMMANDS = (list_cmd, run_cmd, table_cmd, plot_cmd, compare_cmd, verify_cmd, report_cmd, info_cmd, profile_cmd, cost_cmd,
            device_cmd, convert_cmd, analyze_cmd, db_cmd, history_cmd, export_cmd)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="benchbench", description="Benchmark Vision Transformers against CNNs.")
    p.add_argument("--version", action="version", version=f"benchbench {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    parent = plugin_options()
    for command in COMMANDS:
        command.add_parser(sub, parent)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser().parse_args(argv)
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


def _interrupt(signum, frame):
    raise KeyboardInterrupt
