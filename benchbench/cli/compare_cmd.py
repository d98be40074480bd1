"""`benchbench compare RUN_A RUN_B [--models NAME ...] [--gate G] [--threshold PTS] [--alpha A]
[--min-effect PTS] [--timing-threshold PCT] [--all] [--json]`, and
`benchbench compare RUN --models A B [C ...] [--alpha A] [--json]` (contenders against contenders,
every pair). The verdicts are benchbench.judge.rule's.

Exit status, two runs: 0 no regression in a gated group (also when only ungated groups regressed), 1 at
least one gated regression, 2 the runs cannot be compared (no cell in common, a bad option or path).
One run with --models: 0 when it ran, 2 for bad input (an unknown contender, fewer than two, an
option out of range).
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from benchbench.cli.common import load_run, named_plugins
from benchbench.errors import BenchError
from benchbench.text import plural


def rule_options(*, single: str) -> argparse.ArgumentParser:
    """The options of the one judging rule (benchbench.judge.rule.Rules), as compare and history take them;
    `single`: what a value is on its own in this command ("seed", "point")."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--threshold", type=float, default=5.0, metavar="PTS",
                   help=f"one {single} a side and no test-set size: an accuracy drop of more than PTS points is a "
                        "regression (default 5)")
    p.add_argument("--alpha", type=float, default=0.05, metavar="A",
                   help="significance of every test, in (0, 1) (default 0.05)")
    p.add_argument("--min-effect", type=float, default=0.5, metavar="PTS",
                   help="the smallest tested accuracy drop, in points, that counts (default 0.5)")
    p.add_argument("--timing-threshold", type=float, default=10.0, metavar="PCT",
                   help="the smallest timing move, in percent, that counts; timings also need a noise estimate: 2 "
                        "or more values a side, or 3 or more against one (default 10)")
    return p


def rules_of(args, gates: tuple[str, ...] | None = None):
    """The judging rule the options ask for, range-checked (BenchError for a value out of range)."""
    from benchbench.judge.rule import DEFAULT_GATES, Rules

    return Rules(threshold=args.threshold, alpha=args.alpha, min_effect=args.min_effect,
                 timing_threshold=args.timing_threshold, gates=gates or DEFAULT_GATES).check()


def add_parser(sub, parent) -> None:
    p = sub.add_parser("compare", parents=[parent, rule_options(single="seed")],
                       help="compare two runs (exit 1 when B regressed against A beyond noise), or contenders "
                            "within a run (--models); paired tests where predictions were kept")
    p.add_argument("run_a", metavar="RUN_A", help="the baseline run directory (or the one run, with --models)")
    p.add_argument("run_b", metavar="RUN_B", nargs="?", help="the run to judge")
    p.add_argument("--models", nargs="+", metavar="NAME",
                   help="one run: compare these contenders (a model with its weights, by name, or a model's id where "
                        "the run has one contender of it), every pair, on the configurations they share (Holm "
                        "across all); two runs: compare only these contenders' cells")
    p.add_argument("--json", action="store_true",
                   help="one JSON object: each comparison's test, p_value, p_adjusted, diff, diff_ci95, n_images")
    p.add_argument("--gate", action="append", metavar="GROUP",
                   help="which metric groups decide the exit status: accuracy, model (params, MACs), timing "
                        "(img/s, seconds, memory, MFU), any other group benchbench.judge.rule registers, or all; "
                        "repeatable (default: accuracy and model)")
    p.add_argument("--all", action="store_true", help="list every compared metric, not only the ones that moved")
    p.set_defaults(func=run)


def _gates(chosen: list[str] | None) -> tuple[str, ...]:
    from benchbench.judge.rule import DEFAULT_GATES, GROUPS

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


def _num(x):
    """A JSON number, or null for NaN/None."""
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


def _ci(ci) -> str:
    return "" if not isinstance(ci, list) else f"[{ci[0] * 100:+.2f}, {ci[1] * 100:+.2f}]"


def _p(p) -> str:
    return "-" if p is None or (isinstance(p, float) and math.isnan(p)) else f"{p:.3g}"


def run_models(args) -> int:
    """Contenders against contenders within one run (benchbench.judge.versus)."""
    from tabulate import tabulate

    from benchbench.judge.versus import COLUMNS, versus

    df = versus(load_run(args.run_a), args.run_a, args.models, alpha=args.alpha)
    if args.json:
        print(json.dumps({"run": args.run_a, "alpha": args.alpha, "correction": "holm",
                          "comparisons": [{k: _num(r[k]) for k in COLUMNS} for _, r in df.iterrows()]}, indent=1))
        return 0
    rows = [[r.dataset + (f" ({r.setting})" if r.setting else ""), r.protocol, r.metric,
             f"{r.contender_b} vs {r.contender_a}",
             f"{r.acc_b * 100:.2f} vs {r.acc_a * 100:.2f}", f"{r.diff * 100:+.2f}", _ci(r.diff_ci95), r.test,
             _p(r.p_value), _p(r.p_adjusted), "-" if math.isnan(r.mdd) else f"{r.mdd * 100:.2f}", r.verdict]
            for r in df.itertuples()]
    print(tabulate(rows, ["Dataset", "Protocol", "Metric", "B vs A", "Top-1 % (B vs A)", "B - A (pts)",
                          "95 % CI (pts)", "Test", "p", "p (Holm)", "Detectable (pts)", "Verdict"],
                   tablefmt="github", disable_numparse=True))
    tested = int(df["p_adjusted"].notna().sum())
    print(f"\n{plural(len(df), 'comparison')}, {tested} tested; Holm's correction over the {tested} at alpha "
          f"{args.alpha:g}. "
          "Paired: exact McNemar on the images both contenders were evaluated on, seeds paired seed by seed "
          "(discordant images summed; the bootstrap resamples images with all their seeds, or each seed's on "
          "their own where seeds saw different images); unpaired: Welch's "
          "t-test over seeds. Detectable: the smallest difference the paired test finds with 80 % power.",
          file=sys.stderr)
    return 0


def run(args) -> int:
    from tabulate import tabulate

    from benchbench.judge.compare import compare

    gates = _gates(args.gate)
    rules = rules_of(args, gates)  # every option range-checked, whichever the mode
    if args.run_b is None:
        if not args.models:
            raise BenchError("compare: give two runs (RUN_A RUN_B), or one run and --models A B [C ...]")
        return run_models(args)
    cat = named_plugins(args)
    a, b = load_run(args.run_a), load_run(args.run_b)
    if args.models:
        from benchbench.store.contender import pick
        from benchbench.judge.versus import entries

        a, b = (df[df["contender"].isin(pick(entries(df), args.models, run_dir))] if "contender" in df else df
                for df, run_dir in ((a, args.run_a), (b, args.run_b)))
    if _settings_apart(a, b):  # one run's records predate a setting: match them at its default
        from benchbench.store.results import with_default_settings

        cat = cat or _quiet_catalog()
        if cat is not None:
            a, b = with_default_settings(a, cat), with_default_settings(b, cat)
    df = compare(a, b, rules.threshold, alpha=rules.alpha, min_effect=rules.min_effect,
                 timing_threshold=rules.timing_threshold, gates=gates, dirs=(args.run_a, args.run_b))
    cells = df["cell"].nunique()
    gated = int((df["regression"] & df["gated"]).sum())
    if args.json:
        keys = ("cell", "contender", "metric", "group", "mean_a", "mean_b", "test", "p_value", "p_adjusted", "diff", "diff_ci95",
                "n_images", "verdict", "regression", "gated", "rule")
        print(json.dumps({"run_a": args.run_a, "run_b": args.run_b, "correction": "holm (accuracy comparisons)",
                          "regressions_gated": gated,
                          "comparisons": [{k: _num(r[k]) for k in keys} for _, r in df.iterrows()]}, indent=1,
                         default=str))
        return 1 if gated else 0
    if (df["verdict"] == "same").all():
        print(f"identical: the {plural(cells, 'cell')} the two runs share have the same values in all "
              f"{plural(len(df), 'comparison')} (cell x metric)")
    else:
        shown = df if args.all else df[df["verdict"] != "same"]
        verdicts = ["REGRESSION" if r.regression and r.gated else "regression (not gated)" if r.regression
                    else r.verdict for r in shown.itertuples()]
        rows = [[r.cell, r.metric, _value(r.mean_a, r.std_a, r.n_a, r.group), _value(r.mean_b, r.std_b, r.n_b, r.group),
                 r.change, v, r.test, r.rule] for r, v in zip(shown.itertuples(), verdicts)]
        print(tabulate(rows, ["Cell", "Metric", "A", "B", "B vs A", "Verdict", "Test", "Rule"], tablefmt="github",
                       disable_numparse=True))
    ungated = int((df["regression"] & ~df["gated"]).sum())
    unjudged = int((df["verdict"] == "unjudged").sum())
    lines = [f"{plural(cells, 'cell')} (seeds aggregated), {plural(len(df), 'comparison')} (cell x metric); "
             f"{plural(gated, 'regression')} in the gated groups ({', '.join(gates)})"
             + (f"; {ungated} more in groups that do not gate" if ungated else "")]
    if unjudged:
        lines.append(f"{plural(unjudged, 'timing change')} beyond {args.timing_threshold:g} % not judged: too few "
                     "values to estimate the machine's noise (it takes 2 or more per run, or 3 or more against one: "
                     "run 2 or more seeds)")
    for side, run_dir in (("only_a", args.run_a), ("only_b", args.run_b)):
        if df.attrs[side]:
            lines.append(f"only in {run_dir}: {plural(len(df.attrs[side]), 'cell')} ({', '.join(df.attrs[side][:5])}"
                         f"{', ...' if len(df.attrs[side]) > 5 else ''})")
    print("\n" + "\n".join(lines), file=sys.stderr)
    return 1 if gated else 0
