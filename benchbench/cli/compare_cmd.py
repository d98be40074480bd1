"""`benchbench compare RUN_A RUN_B [--gate G] [--threshold PTS] [--alpha A] [--min-effect PTS]
[--timing-threshold PCT] [--all]`.

Exit status: 0 no regression in a gated group (also when only ungated groups regressed), 1 at
least one gated regression, 2 the runs cannot be compared (no cell in common, a bad option or path).
"""

from __future__ import annotations

import sys

from benchbench.cli.common import load_run, named_plugins
from benchbench.text import plural

GATE_CHOICES = ("accuracy", "model", "timing", "all")


def add_parser(sub, parent) -> None:
    p = sub.add_parser("compare", parents=[parent],
                       help="compare two runs, seeds aggregated; exit 1 when B regressed against A beyond noise")
    p.add_argument("run_a", metavar="RUN_A", help="the baseline run directory")
    p.add_argument("run_b", metavar="RUN_B", help="the run to judge")
    p.add_argument("--gate", action="append", choices=GATE_CHOICES, metavar="GROUP",
                   help="which metric groups decide the exit status: accuracy, model (params, MACs), timing "
                        "(img/s, seconds, memory, MFU), all; repeatable (default: accuracy and model)")
    p.add_argument("--threshold", type=float, default=5.0, metavar="PTS",
                   help="single-seed cells: an accuracy drop of more than PTS points is a regression (default 5)")
    p.add_argument("--alpha", type=float, default=0.05, metavar="A",
                   help="cells with 2 or more seeds per run: significance of Welch's one-sided t-test (default 0.05)")
    p.add_argument("--min-effect", type=float, default=0.5, metavar="PTS",
                   help="cells with 2 or more seeds: the smallest accuracy drop, in points, that counts (default 0.5)")
    p.add_argument("--timing-threshold", type=float, default=10.0, metavar="PCT",
                   help="the smallest timing move, in percent, that counts; timings also need 2 or more values "
                        "per run and Welch's test (default 10)")
    p.add_argument("--all", action="store_true", help="list every compared metric, not only the ones that moved")
    p.set_defaults(func=run)


def _gates(chosen: list[str] | None) -> tuple[str, ...]:
    from benchbench.compare import DEFAULT_GATES, GROUPS

    if not chosen:
        return DEFAULT_GATES
    return GROUPS if "all" in chosen else tuple(dict.fromkeys(chosen))


def _settings_apart(a, b) -> bool:
    """Whether one run has settings columns the other lacks (records of different settings schemas)."""
    columns = [{c for c in df.columns if c.startswith("setting.")} for df in (a, b)]
    return columns[0] != columns[1]


def _quiet_catalog():
    """The plugins, to learn the defaults of settings that older records lack; None if they cannot load
    (the comparison then matches on the settings as recorded)."""
    from benchbench.plugins import load_catalog

    try:
        return load_catalog()
    except Exception:  # noqa: BLE001 - a comparison of records must not need the plugins
        return None


def _value(mean: float, std: float, n: int, group: str) -> str:
    """Accuracy in percent, a model's counts in full, timings to 4 digits; seeds as mean ± std (n)."""
    if group == "model":
        return f"{mean:,.0f}" if mean == int(mean) else f"{mean:.6g}"
    scale, spec = (100, ".2f") if group == "accuracy" else (1, ".4g")
    text = format(mean * scale, spec)
    if n > 1:
        text += f" ± {format(std * scale, spec)} (n={n})"
    return text


def run(args) -> int:
    from tabulate import tabulate

    from benchbench.compare import compare

    cat = named_plugins(args)
    a, b = load_run(args.run_a), load_run(args.run_b)
    if _settings_apart(a, b):  # one run's records predate a setting: match them at its default
        from benchbench.results import with_default_settings

        cat = cat or _quiet_catalog()
        if cat is not None:
            a, b = with_default_settings(a, cat), with_default_settings(b, cat)
    gates = _gates(args.gate)
    df = compare(a, b, args.threshold, alpha=args.alpha, min_effect=args.min_effect,
                 timing_threshold=args.timing_threshold, gates=gates)
    cells = df["cell"].nunique()
    if (df["verdict"] == "same").all():
        print(f"identical: the {plural(cells, 'cell')} the two runs share have the same values in all "
              f"{plural(len(df), 'comparison')} (cell x metric)")
    else:
        shown = df if args.all else df[df["verdict"] != "same"]
        verdicts = ["REGRESSION" if r.regression and r.gated else "regression (not gated)" if r.regression
                    else r.verdict for r in shown.itertuples()]
        rows = [[r.cell, r.metric, _value(r.mean_a, r.std_a, r.n_a, r.group), _value(r.mean_b, r.std_b, r.n_b, r.group),
                 r.change, v, r.rule] for r, v in zip(shown.itertuples(), verdicts)]
        print(tabulate(rows, ["Cell", "Metric", "A", "B", "B vs A", "Verdict", "Rule"], tablefmt="github",
                       disable_numparse=True))
    gated = int((df["regression"] & df["gated"]).sum())
    ungated = int((df["regression"] & ~df["gated"]).sum())
    unjudged = int((df["verdict"] == "unjudged").sum())
    lines = [f"{plural(cells, 'cell')} (seeds aggregated), {plural(len(df), 'comparison')} (cell x metric); "
             f"{plural(gated, 'regression')} in the gated groups ({', '.join(gates)})"
             + (f"; {ungated} more in groups that do not gate" if ungated else "")]
    if unjudged:
        lines.append(f"{plural(unjudged, 'timing change')} beyond {args.timing_threshold:g} % not judged: one value "
                     "per run says nothing about the machine's noise (run 2 or more seeds)")
    for side, run_dir in (("only_a", args.run_a), ("only_b", args.run_b)):
        if df.attrs[side]:
            lines.append(f"only in {run_dir}: {plural(len(df.attrs[side]), 'cell')} ({', '.join(df.attrs[side][:5])}"
                         f"{', ...' if len(df.attrs[side]) > 5 else ''})")
    print("\n" + "\n".join(lines), file=sys.stderr)
    return 1 if gated else 0
