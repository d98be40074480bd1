"""`benchbench history --model M --dataset D --protocol P --metric top1 [--since RUN|COMMIT|DATE]`:
one cell's figure across runs, from the results database, with its regressions (each step judged
by benchbench.judge.rule, the rule compare uses; its options are compare's). Exit 1 when a regression is
newer than --since (for CI)."""

from __future__ import annotations

import json
import subprocess
import sys

from benchbench.cli.compare_cmd import rule_options, rules_of
from benchbench.cli.db_cmd import db_options, db_url
from benchbench.errors import BenchError
from benchbench.text import plural


def add_parser(sub, parent) -> None:
    p = sub.add_parser("history", parents=[parent, db_options(), rule_options(single="point")],
                       help="a figure of a cell across runs, with its regressions (steps found as asv finds them, "
                            "judged as compare judges)")
    p.add_argument("--model", required=True, metavar="ID")
    p.add_argument("--dataset", required=True, metavar="ID")
    p.add_argument("--protocol", required=True, metavar="ID")
    p.add_argument("--metric", required=True, metavar="NAME", help="a metric as records name it: top1, img_per_s, "
                   "train_device_days, ...")
    p.add_argument("--since", metavar="RUN|COMMIT|DATE",
                   help="exit 1 when a regression's first run is newer than this run id, commit or date")
    p.add_argument("--order", choices=("time", "commit"), default="time",
                   help="order each series by the time its records finished (default), or by commit: the order "
                        "of --repo's history (git rev-list --topo-order), time within a commit")
    p.add_argument("--repo", default=".", metavar="DIR", help="the git repository whose commits ran the records "
                   "(--order commit; default: here)")
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.add_argument("--plot", metavar="FILE.png|svg|pdf",
                   help="also draw a panel per series: its points, the fitted levels, each regression marked")
    p.set_defaults(func=run)


def _text(series, metric: str) -> list[str]:
    from benchbench.judge.history import environments

    lines = []
    apart = environments(series)
    for key, envs in apart.items():
        lines.append(f"note: cell {key}'s timings come from {len(envs)} environments; each is a series of its own, "
                     "never compared with another: " + "; ".join(envs))
    for s in series:
        head = (f"cell {s.key}" + (f" ({s.label})" if s.label else "")
                + (f" on {s.environment}" if s.environment else ""))
        first, last = s.points[0], s.points[-1]
        lines.append(f"{head}: {plural(len(s.points), 'point')}, {first.label} to {last.label}; "
                     f"{metric} now {last.value:.6g}")
        if len(s.points) < 2:
            lines.append("  one point: nothing to compare")
        for r in s.regressions:
            lines.append(f"  regression: {metric} {r.before:.6g} -> {r.after:.6g} ({r.size:+.6g}, {r.relative:+.1%}) "
                         f"first at {r.first.label}; last good {r.last_good.label}")
            lines.append(f"    {r.judged.test}: {r.judged.rule}")
        if not s.regressions:
            lines.append(f"  no regression ({plural(s.improvements, 'improvement')})")
        if s.unjudged:
            lines.append(f"  {plural(s.unjudged, 'step')} not judged: one point a side says nothing about the "
                         "machine's noise (it takes 2 or more a side, or 3 or more against one)")
    return lines


def _json(series, newer, metric: str) -> dict:
    def point(p):
        return {"run_id": p.run_id, "commit": p.commit, "finished_at": p.finished_at, "value": p.value}

    return {"metric": metric, "series": [
        {"key": s.key, "label": s.label, "environment": s.environment, "points": [point(p) for p in s.points],
         "regressions": [{"first": point(r.first), "last_good": point(r.last_good), "before": r.before,
                          "after": r.after, "size": r.size, "relative": r.relative, "test": r.judged.test,
                          "p_value": None if r.judged.p_value != r.judged.p_value else r.judged.p_value,
                          "rule": r.judged.rule} for r in s.regressions],
         "improvements": s.improvements, "unjudged": s.unjudged}
        for s in series], "regressions_since": None if newer is None else len(newer)}


def commit_order(repo: str) -> dict[str, int]:
    """{commit: its position} in the repository's history, oldest first (parents before children)."""
    try:
        out = subprocess.run(["git", "-C", repo, "rev-list", "--topo-order", "--reverse", "--all"],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise BenchError(f"--repo {repo}: cannot run git ({error})") from None
    if out.returncode != 0:
        first = (out.stderr.strip().splitlines() or ["not a git repository"])[0]
        raise BenchError(f"--repo {repo}: {first}")
    return {sha: i for i, sha in enumerate(out.stdout.split())}


def run(args) -> int:
    from benchbench.db.connect import open_database
    from benchbench.db.query import Filters, select_records
    from benchbench.judge.history import history, newer_than

    rules = rules_of(args)
    db = open_database(db_url(args), write=False)
    try:
        found = select_records(db, Filters(models=(args.model,), datasets=(args.dataset,),
                                           protocols=(args.protocol,), statuses=("ok",)))
    finally:
        db.close()
    if not found:
        raise BenchError(f"{db.where}: no successful record of {args.model} x {args.dataset} x {args.protocol}")
    order = commit_order(args.repo) if args.order == "commit" else None
    series = history(found, args.metric, rules, order)
    newer = newer_than(series, args.since) if args.since else None
    if args.plot:
        from benchbench.report.history_figures import save

        save(series, args.metric, args.plot, f"{args.model} x {args.dataset} x {args.protocol}: {args.metric}")
    if args.json:
        print(json.dumps(_json(series, newer, args.metric), indent=2))
    else:
        print("\n".join(_text(series, args.metric)))
        if newer:
            print(f"{plural(len(newer), 'regression')} newer than {args.since}", file=sys.stderr)
    return 1 if newer else 0
