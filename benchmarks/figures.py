"""The docs' generated text: each table or sentence that quotes a measured figure, written from the result file
that holds it (docs/results/<name>.json, kept by benchmarks.record). In a page, between cog markers:

  <!-- [[[cog from benchmarks.figures import show; show("headline")]]] -->
  ...generated...
  <!-- [[[end]]] -->

`cog -r -I . README.md docs/*.md` writes them; `make lint` runs `cog --check`, so a hand-edited figure fails.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from benchmarks.defaults import check
from nameorigin.evaluation.margin import BASELINE_NAMES
from nameorigin.fit.timing import fit_seconds, step_seconds
from nameorigin.training.transfer import compared

RESULTS = Path(__file__).resolve().parent.parent / "docs" / "results"


def result(name: str) -> dict:
    """A result file's figures, refused once the defaults it was recorded under have changed (benchmarks.defaults)."""
    return recorded(name)["figures"]


def points(value: float) -> str:
    return f"{value:+.2f}"


def interval(low_high: list[float]) -> str:
    return f"[{points(low_high[0])}, {points(low_high[1])}]"


SHOWN = ("test/abstained", "test/acc", "test/acc_any", "test/coverage_90", "test/ece", "test/macro_f1",
         "test/set_size_90", "val/acc_best")


def default_run() -> str:
    """The results block the run printed (its main lines and the margin), its folder as <run>."""
    figures = result("default_run")
    metrics, margin = figures["metrics"], figures["margin"]
    shown = {k: v for k, v in metrics.items() if k in SHOWN}
    lines = [f"  {k:<16} {v:.4f}" for k, v in sorted(shown.items())]
    from nameorigin.evaluation.margin import margin_line

    where = [f"  transfer         validation kept the model from the names-dataset starting point "
             f"({metrics['transfer/val_acc_transferred']:.4f} from the starting point, "
             f"{metrics['transfer/val_acc_plain']:.4f} plain)",
             "  best checkpoint  outputs/<run>/transfer/checkpoints/best.ckpt"] if metrics.get("transfer/chosen") \
        else ["  model            outputs/<run>/checkpoints/refit.ckpt  (refit on train + validation; the one tested)"]
    return "\n".join(["```", "results:", *lines, f"  margin           {margin_line(margin)}", *where,
                      "  dashboard        tensorboard --logdir outputs/<run>", "```", ""])


def headline() -> str:
    seeds, plain = result("seeds"), result("seeds_plain")["mean"]
    mean, kept = seeds["mean"], sum(run.get("transferred", False) for run in seeds["splits"])
    return ("| model | test accuracy | test macro-F1 |\n|---|---|---|\n"
            f"| n-gram LR, refitted on train + validation | {mean['baseline_acc']:.4f} | "
            f"{mean['baseline_macro_f1']:.4f} |\n"
            f"| nameorigin without a starting point (GRU + n-gram head, mixed with its linear part; refitted) | "
            f"{plain['test_acc']:.4f} | {plain['test_macro_f1']:.4f} |\n"
            f"| nameorigin after `make pretrain` (validation kept the model from the starting point on {kept} of "
            f"{len(seeds['splits'])} splits) | **{mean['test_acc']:.4f}** | **{mean['test_macro_f1']:.4f}** |\n")


def nine_runs() -> str:
    nine, plain = result("seeds")["nine_runs"], result("seeds_plain")["nine_runs"]
    return (f"Over nine runs (split and initialization seeds 0-2) the default after `make pretrain` leads the "
            f"baseline by {points(nine['margin'])} points, pooled 95 % interval {interval(nine['interval'])}; "
            f"without the starting point it led by {points(plain['margin'])} {interval(plain['interval'])}.\n")


def seeds() -> str:
    rows = ["| split seed | val acc | test acc | test macro-F1 | n-gram LR: acc, macro-F1 | margin, 95 % paired "
            "interval |", "|---|---|---|---|---|---|"]
    found = result("seeds")
    for s in found["splits"]:
        rows.append(f"| {s['split_seed']} | {s['val_acc']:.4f} | {s['test_acc']:.4f} | {s['test_macro_f1']:.4f} | "
                    f"{s['baseline_acc']:.4f}, {s['baseline_macro_f1']:.4f} | {points(s['margin'])} "
                    f"{interval(s['interval'])} |")
    m = found["mean"]
    rows.append(f"| mean | | **{m['test_acc']:.4f}** | **{m['test_macro_f1']:.4f}** | {m['baseline_acc']:.4f}, "
                f"{m['baseline_macro_f1']:.4f} | {points(m['margin'])} |")
    return "\n".join(rows) + "\n"


def gradient_check() -> str:
    """The default run's gradient check, as its train.log summarizes it."""
    check = result("default_run")["gradient_check"]
    weights = ", ".join(f"`{w}` {check['horizon90'][w]:.1f} characters ({check['last_char_share'][w]:.3f})"
                        for w in check["horizon90"])
    return (f"{check['checks']} checks; the largest residual of any weight at any check "
            f"{check['max_residual']:.1e}. Over the last 10 checks (names of {check['mean_name_length']:.1f} "
            f"characters on average), the fewest final characters holding 90 % of each weight's gradient (and the "
            f"last character's share): {weights}.\n")


def set_kinds() -> str:
    """The default run's test coverage and set size for both kinds of prediction set, at every level."""
    metrics = result("default_run")["metrics"]
    rows = ["| level | marginal sets: test coverage, mean size | class-conditional sets: test coverage, mean size |",
            "|---|---|---|"]
    for level in (80, 90, 95):
        cells = [f"{metrics[f'test/coverage_{level}_{kind}']:.3f}, {metrics[f'test/set_size_{level}_{kind}']:.2f}"
                 for kind in ("marginal", "mondrian")]
        rows.append(f"| {level} % | {cells[0]} | {cells[1]} |")
    return "\n".join(rows) + "\n"


def h200() -> str:
    found = recorded("h200")
    f = found["figures"]
    return (f"On {found['machine']} ({found['date']}, before the GPU fast path; the commit is in "
            f"docs/results/h200.json): the default run in "
            f"{f['default_run_seconds']:.0f} s, test accuracy {f['default_run_test_acc']:.4f}, macro-F1 "
            f"{f['default_run_test_macro_f1']:.4f}; the surnames pretraining at {f['pretraining_epoch_seconds']} s an "
            f"epoch, {f['pretraining_speedup_over_2_cpu_cores']} times the 2-core CPU.\n")


def serve_load() -> str:
    found = result("serve_load")
    reference = found["in_process_names_per_s"]
    rows = ["| concurrency | names a request | p50 ms | p95 ms | p99 ms | names/s | of in-process |",
            "|---:|---:|---:|---:|---:|---:|---:|"]
    for r in found["levels"]:
        rows.append(f"| {r['concurrency']} | {r['names_per_request']} | {r['p50_ms']:.1f} | {r['p95_ms']:.1f} | "
                    f"{r['p99_ms']:.1f} | {r['names_per_s']:,.0f} | {r['names_per_s'] / reference:.0%} |")
    answered = "every one answered 4xx" if not found["hostile_not_4xx"] else "**some not answered 4xx**"
    return "\n".join(rows) + (f"\n\nHostile requests of {len(found['hostile'])} kinds: {answered}; "
                              f"afterwards `/health` answered {found['ready_before_after'][1]} and the probe names' "
                              f"probabilities moved by at most {found['probe_gap']:.1e}.\n")


def ray() -> str:
    found = result("score_scale")
    ray, single = found["results"]["ray"], found["results"]["parquet"]
    check = found["ray_check"]
    differing = check["differing_columns"]
    if not differing:
        same = "the same as the single-process output, every row"
    elif differing == ["pred_reason"]:  # the abstention reason prints its score to two decimals
        same = ("the same as the single-process output in every column but `pred_reason`, where an abstention's "
                "printed score differs by 0.01 on a few rows: the score itself moves by less than the probabilities "
                "do between batchings, and the verdicts are equal")
    else:
        same = f"**different from** the single-process output in {', '.join(differing)}"
    return (f"On the 10-million-row table, Ray Data with 2 actors took {ray['seconds'] / single['seconds']:.1f} "
            f"times the single-process time, and its output was {same} (probabilities within "
            f"{check['max_probability_gap']:.1e}).\n")


def recorded(name: str) -> dict:
    """A whole result file: its command, commit, machine, date and seconds beside the figures; refused once the
    defaults it was recorded under have changed (benchmarks.defaults)."""
    found = json.loads((RESULTS / f"{name}.json").read_text())
    check(name, found, RESULTS.parent.parent / "conf")
    return found


# One name for each baseline, as the run's margin names it; "sgd": the margin step's model when NaNa was recorded.
BASELINES = {**BASELINE_NAMES, "sgd": "hashed n-gram SGD"}


def gender() -> str:
    found = result("first_name_gender")
    metrics, margin = found["metrics"], found["margin"]
    baseline = f"{BASELINES[margin['kind']]} ({margin['setting']} on validation)"
    return ("| model | test accuracy | test macro-F1 |\n|---|---|---|\n"
            f"| {baseline}, same split | {margin['baseline_acc']:.4f} | {margin['baseline_macro_f1']:.4f} |\n"
            f"| nameorigin `experiment=first_name_gender` | **{metrics['test/acc']:.4f}** | "
            f"**{metrics['test/macro_f1']:.4f}** |\n\n"
            f"{margin['size']:,} test names; the margin is {points(100 * margin['margin'])} points, 95 % paired "
            f"interval {interval([100 * x for x in margin['interval']])}.{gender_details(metrics, margin)}\n")


def gender_details(metrics: dict, margin: dict) -> str:
    """Which candidate validation kept, and the margin on the shares the run fits."""
    text = ""
    if "transfer/chosen" in metrics:
        kept = "the model from the starting point" if metrics["transfer/chosen"] else "the plain model"
        objective, plain, transferred = compared(metrics)
        figure = "share-weighted accuracy" if objective == "val/person_acc" else "accuracy"
        text += (f" Validation kept {kept} ({figure} {transferred:.4f} from the starting point, {plain:.4f} "
                 "plain).")
    if "test/share_in_pretrain" in metrics:
        text += (f" {metrics['test/share_in_pretrain']:.1%} of the test names are among the names the starting "
                 "point learnt from.")
    like = margin.get("like_for_like")
    if like:
        text += (f" Against a baseline fitted to the same shares, the share-weighted accuracy is "
                 f"{like['model_person_acc']:.4f} against {like['baseline_person_acc']:.4f}: "
                 f"{points(100 * like['person_margin'])} {interval([100 * x for x in like['interval']])}.")
    return text


# name2nat 0.5.1's README: precision@1..5 on its own random split of samples.
NAME2NAT_AT_K = (55.1, 69.6, 77.9, 83.0, 86.8)


def at_k(precision: dict) -> list[float]:
    """A result file's precision@K (keys "1".."5") as percentages in K order."""
    return [100 * precision[key] for key in sorted(precision, key=int)]


def nana_rows() -> list[tuple[str, list[float], float | None, bool]]:
    """The NaNa table's rows: name, precision@1..5 in %, macro-F1, bold. The run's margin and `evaluate --baseline`
    share one row where they fitted the same baseline to the same figures."""
    run, later = result("nana"), result("nana_baseline")["baseline"]
    margin, served = run["margin"], "transferred" if run["metrics"].get("transfer/chosen") else "plain"
    if same_baseline(margin, later):
        baselines = [(f"{BASELINES[margin['kind']]}, same split (the run's margin and `evaluate --baseline "
                      f"{later['kind']}`)", at_k(margin["baseline_precision_at"]), margin["baseline_macro_f1"], False)]
    else:
        baselines = [(f"{BASELINES[margin['kind']]}, same split (the run's margin)",
                      at_k(margin["baseline_precision_at"]), margin["baseline_macro_f1"], False),
                     (f"{BASELINES[later['kind']]}, same split (`evaluate --baseline {later['kind']}`)",
                      at_k(later["baseline_precision_at"]), later["baseline_macro_f1"], False)]
    return [("name2nat 0.5.1 (its README; random split of samples)", list(NAME2NAT_AT_K), None, False), *baselines,
            (f"**nameorigin `experiment=nana`** (the {served} model, validation's pick)",
             at_k(margin["model_precision_at"]), margin["model_macro_f1"], True)]


def same_baseline(margin: dict, later: dict) -> bool:
    return margin["kind"] == later["kind"] and margin["baseline_precision_at"] == later["baseline_precision_at"]


def nana() -> str:
    rows = ["| model | precision@1 | precision@5 |", "|---|---|---|"]
    for name, at, f1, bold in nana_rows():
        digits = 1 if f1 is None else 2  # name2nat's README gives one decimal
        cells = [f"**{v:.{digits}f} %**" if bold else f"{v:.{digits}f} %" for v in (at[0], at[4])]
        rows.append(f"| {name} | {' | '.join(cells)} |")
    return "\n".join(rows) + "\n\n" + nana_margins()


def nana_margins() -> str:
    margin, later = result("nana")["margin"], result("nana_baseline")["baseline"]
    other = "" if same_baseline(margin, later) else (
        f" and the {BASELINES[later['kind']]} by {points(100 * later['margin'])} "
        f"{interval([100 * x for x in later['interval']])}")
    return (f"The model leads the {BASELINES[margin['kind']]} by {points(100 * margin['margin'])} points of "
            f"precision@1 (95 % paired bootstrap {interval([100 * x for x in margin['interval']])}){other}, on the "
            f"same {margin['size']:,} test pairs.\n")


def nana_plain() -> str:
    """The full table without the starting point: what the network learns by itself, beside its run's baseline."""
    plain = recorded("nana_plain")
    margin = plain["figures"]["margin"]
    return (f"Without the starting point (`{plain['command']}`), P@1 is "
            f"{100 * margin['model_precision_at']['1']:.2f} % and P@5 {100 * margin['model_precision_at']['5']:.2f} %, "
            f"{points(100 * margin['margin'])} {interval([100 * x for x in margin['interval']])} over that run's "
            f"baseline ({100 * margin['baseline_acc']:.2f} %).\n")


def nana_run() -> str:
    """What the recorded run did and what it cost."""
    found = json.loads((RESULTS / "nana.json").read_text())
    metrics, margin = found["figures"]["metrics"], found["figures"]["margin"]
    later = json.loads((RESULTS / "nana_baseline.json").read_text())
    served = "the plain model" if not metrics.get("transfer/chosen") else "the transferred model"
    return (f"The recorded run took {found['seconds'] / 60:.0f} minutes on {found['machine'].split(', ')[1]}: two "
            f"candidates on the same split, validation accuracy {metrics['transfer/val_acc_plain']:.4f} plain and "
            f"{metrics['transfer/val_acc_transferred']:.4f} from the names-dataset starting point "
            f"({metrics['transfer/fit_s_plain'] / 60:.0f} and {metrics['transfer/fit_s_transferred'] / 60:.0f} "
            f"minutes of training), so {served} is served; its margin step fitted the {BASELINES[margin['kind']]} "
            f"baseline in {margin['seconds'] / 60:.0f} minutes. `nameorigin evaluate --baseline ngram` on its "
            f"checkpoint took {later['seconds'] / 60:.0f} minutes." + found_whole(metrics) + "\n")


def found_whole(metrics: dict) -> str:
    """The run's test names that names-dataset holds whole, and its accuracy on them and on the rest."""
    if "test/share_in_pretrain" not in metrics:
        return ""
    return (f" {100 * metrics['test/share_in_pretrain']:.1f} % of the test names are found whole in names-dataset "
            f"(`test/share_in_pretrain`): P@1 {100 * metrics['test/acc_in_pretrain']:.1f} % on those, "
            f"{100 * metrics['test/acc_not_in_pretrain']:.1f} % on the rest.")


def nana_at_k() -> str:
    rows = ["| model | P@1 | P@2 | P@3 | P@4 | P@5 | macro-F1 |", "|---|---|---|---|---|---|---|"]
    for name, at, f1, bold in nana_rows():
        digits = 1 if f1 is None else 2  # name2nat's README gives one decimal
        cells = [f"**{v:.{digits}f} %**" if bold else f"{v:.{digits}f} %" for v in at]
        score = "–" if f1 is None else (f"**{f1:.3f}**" if bold else f"{f1:.3f}")
        rows.append(f"| {name} | {' | '.join(cells)} | {score} |")
    return "\n".join(rows) + "\n\n" + nana_margins()


def score_scale() -> str:
    found = result("score_scale")["results"]
    rows = ["| 10 million rows | seconds | rows/s | peak RSS |", "|---|---:|---:|---:|"]
    for key, label in (("parquet", "Parquet, float32"), ("parquet_bf16", "Parquet, `--precision bf16`"),
                       ("csv", "CSV"), ("ray", "Parquet through Ray Data, 2 actors")):
        if key in found:
            r = found[key]
            rows.append(f"| {label} | {r['seconds']:.1f} | {r['rows'] / r['seconds']:,.0f} | "
                        f"{r['peak_rss_gb']:.2f} GB |")
    return "\n".join(rows) + f"\n\nOn {recorded('score_scale')['machine']}.\n"


def composition() -> str:
    found = result("composition")
    rows = ["| mix | mean: error | em: error | adjusted: error | adjusted: 90 % intervals holding the truth |",
            "|---|---:|---:|---:|---:|"]
    for mix, methods in found["mixes"].items():
        rows.append(f"| {mix} | {methods['mean']['mae']:.3f} | {methods['em']['mae']:.3f} | "
                    f"{methods['adjusted']['mae']:.3f} | {methods['adjusted']['coverage']:.3f} |")
    return "\n".join(rows) + (f"\n\n{found['tables']} tables of {found['size']:,} test names a mix, "
                              f"{found['bootstraps']} bootstrap replicates a table; error: the mean absolute error "
                              "of the shares.\n")


def output(name: str) -> str:
    """A command's printed output, as recorded, in a code block under the command."""
    found = recorded(name)
    return f"```\n{found['figures']['stdout'].rstrip()}\n```\n"


AUDITED = (("corpus", "corpus training split"), ("gender", "first name → gender, 30k"), ("nana", "NaNa, 30k"))


def found_at(found: dict, cut: str | None = None) -> str:
    """Precision / recall of one audit_check result at a cut (None: the planted share of the rows)."""
    point = found["cuts"][cut] if cut else next(point for point in found["curve"] if point["depth"] == 0.05)
    return f"{point['precision']:.2f} / {point['recall']:.2f}"


def f1_at(found: dict, cut: str) -> str:
    """F1 of one audit_check result at a cut, or of cleanlab's recipe ("recipe")."""
    return f"{(found['recipe'] if cut == 'recipe' else found['cuts'][cut])['f1']:.2f}"


def by_seed(runs: list[dict], key: str) -> list[tuple[str, list[dict]]]:
    """audit_check results grouped by `key` (kind or model), in their order: each value's runs, one per seed."""
    return [(value, [run for run in runs if run[key] == value]) for value in dict.fromkeys(run[key] for run in runs)]


def audit_tables() -> str:
    """F1 of every cut of the audit, of cleanlab's recipe and of the planted count, on the corpus and two tables,
    planted flips at seeds 1 and 2 (benchmarks.audit_check): each cell is seed 1 · seed 2."""
    cuts = ("mixture", "recipe", "planted_count", "threshold", "estimate", "noise_rate", "confident")
    shown = {"mixture": "`mixture` (default)", "recipe": "cleanlab's recipe", "planted_count": "the planted count"}
    rows = ["| table, flips (5 %; F1 at seed 1 · seed 2) | " + " | ".join(shown.get(cut, f"`{cut}`") for cut in cuts)
            + " | flagged: `mixture` / recipe / planted (seed 1) |", "|---" * (len(cuts) + 2) + "|"]
    for name, table in AUDITED:
        kinds: dict[tuple[int, str], list[str]] = {}  # a row's size and figures: the kinds that gave them
        for kind, found in by_seed(result(f"audit_table_{name}"), "kind"):
            cells = [" · ".join(f1_at(run, cut) for run in found) for cut in cuts]
            first = found[0]
            counts = (f"{first['cuts']['mixture']['flagged']:,} / {first['recipe']['flagged']:,} / "
                      f"{first['cuts']['planted_count']['flagged']:,}")
            kinds.setdefault((first["rows"], " | ".join([*cells, counts])), []).append(kind)
        # With two labels both kinds of flip relabel a row to the other label: one row, both named.
        rows += [f"| {table} ({size:,} rows), {' or '.join(named)} | {figures} |"
                 for (size, figures), named in kinds.items()]
    return "\n".join(rows) + "\n"


def audit_models() -> str:
    """The n-gram model and the network answering out of sample, on the same uniform flips and folds."""
    rows = ["| table (5 % uniform flips; seed 1 · seed 2) | model | `threshold` | `estimate` | "
            "at 5 % of the rows | out of sample (seed 1) |", "|---|---|---|---|---|---:|"]
    for name, shown in AUDITED:
        for model, found in by_seed(result(f"audit_network_{name}"), "model"):
            cells = [" · ".join(found_at(run, cut) for run in found) for cut in ("threshold", "estimate", None)]
            rows.append(f"| {shown} | {model} | " + " | ".join(cells) + f" | {found[0]['seconds']:.0f} s |")
    return "\n".join(rows) + "\n"


def audit_scale() -> str:
    """The audit of a whole table with its defaults: seconds and peak memory (benchmarks.audit_scale)."""
    found = recorded("audit_nana_full")
    cost = found["figures"]
    return (f"The audit of the whole NaNa table with the defaults took {cost['seconds'] / 60:.1f} minutes and "
            f"{cost['peak_rss_gb']:.2f} GB at its peak on {found['machine'].split(', ')[1]} "
            f"(`{found['command']}`): {cost['said'].split('; wrote ')[0]}.\n")


def pretrain() -> str:
    found = recorded("pretrain")
    metrics = found["figures"]["metrics"]
    return (f"`make pretrain` took {found['seconds'] / 60:.1f} minutes on 2 CPU cores, the gender table and the "
            f"conversion from the installed package included, and the country model scores top-1 "
            f"{metrics['test/acc']:.4f} and top-5 {metrics['test/acc_top5']:.4f} on its test names.\n")


def pretrain_hidden() -> str:
    """The pretraining's hidden size, two sizes side by side for one epoch each on one machine."""
    runs = {size: recorded(f"pretrain_hidden_{size}")["figures"]["metrics"] for size in (256, 384)}
    said = ", ".join(f"{m['val/acc']:.4f} at {size} ({m['time/train_epoch_s']:.0f} s)" for size, m in runs.items())
    return (f"Hidden size, one epoch each on one machine (`docs/results/pretrain_hidden_<size>.json`: "
            f"`model.hidden_size=<size> trainer.max_epochs=1`): validation top-1 {said}. Five epochs at 384 would "
            f"pass `make pretrain`'s 20 minutes, and transferred runs inherit the size: 256 stays.\n")


def transfer_default() -> str:
    run, plain = recorded("default_run"), recorded("default_run_plain")
    metrics, margin = run["figures"]["metrics"], run["figures"]["margin"]
    old = plain["figures"]["metrics"]
    return ("| candidate | validation accuracy | training | test accuracy | test macro-F1 |\n|---|---|---|---|---|\n"
            f"| plain | {metrics['transfer/val_acc_plain']:.4f} | {metrics['transfer/fit_s_plain']:.0f} s | | |\n"
            f"| from the starting point (kept) | **{metrics['transfer/val_acc_transferred']:.4f}** | "
            f"{metrics['transfer/fit_s_transferred']:.0f} s | **{metrics['test/acc']:.4f}** | "
            f"**{metrics['test/macro_f1']:.4f}** |\n"
            f"| the {BASELINE_NAMES[margin['kind']]}, on the same training names | | | {margin['baseline_acc']:.4f} | "
            f"{margin['baseline_macro_f1']:.4f} |\n\n"
            f"The margin is {points(100 * margin['margin'])} points, 95 % paired interval "
            f"{interval([100 * x for x in margin['interval']])}. The whole run took {run['seconds']:.0f} s against "
            f"{plain['seconds']:.0f} s for the plain default with its refit (`default_run_plain`, test accuracy "
            f"{old['test/acc']:.4f}): {run['seconds'] / plain['seconds']:.2f} times.\n")


def transfer_tables() -> str:
    nine, runs = result("seeds")["nine_runs"], result("seeds")["runs"]
    tables = result("small_tables")
    rows = ["| table | validation kept | test accuracy | n-gram baseline | margin, 95 % paired interval | macro-F1 "
            "margin | run |", "|---|---|---|---|---|---|---|",
            f"| 18 languages, nine runs (`python -m benchmarks.record seeds -- python -m benchmarks.seeds --json`) | "
            f"the transferred model in {sum(run['transferred'] for run in runs)} of {len(runs)} | "
            f"{nine['test_acc']:.4f} | {nine['baseline_acc']:.4f} | {points(nine['margin'])} (pooled) "
            f"{interval(nine['interval'])} | {points(100 * (nine['test_macro_f1'] - nine['baseline_macro_f1']))} | |"]
    accents = result("small_tables_accents")["nana_accents"]
    for name, t, wall in (("first name → gender shares, 20k sample", tables["first_name_gender"], True),
                          ("NaNa full names → 20 nationalities, 20k sample", tables["nana"], True),
                          ("the same NaNa sample, accents kept (`data.normalize=none`)", accents, False)):
        rows.append(small_table_row(name, t, f"{t['wall_s']:.0f} s" if wall else ""))
    like = tables["first_name_gender"].get("like_for_like")
    text = "\n".join(rows) + (f"\n\nThe two small tables' mean margin is {points(tables['mean']['margin'])} points "
                                f"of accuracy and {points(tables['mean']['macro_f1_margin'])} of macro-F1 "
                                "(`python -m benchmarks.record small_tables -- python -m benchmarks.small_tables "
                                "--json`).")
    text += (" The accented row is `python -m benchmarks.record small_tables_accents -- python -m "
             "benchmarks.small_tables --tables nana_accents --json`.")
    if like:
        text += (f" On the gender sample, fitted like for like (the baseline on the same shares), the share-weighted "
                 f"accuracy is {like['model']:.4f} against {like['baseline']:.4f}: {points(like['margin'])} "
                 f"{interval(like['interval'])}.")
    return text + "\n"


def small_table_row(name: str, t: dict, wall: str) -> str:
    weighted = ", share-weighted" if t.get("objective") == "val/person_acc" else ""
    kept = f"transferred ({t['val_acc_transferred']:.4f} vs {t['val_acc_plain']:.4f}{weighted})" if t["transferred"] \
        else f"plain ({t['val_acc_plain']:.4f} vs {t['val_acc_transferred']:.4f}{weighted})"
    return (f"| {name} | {kept} | {t['test_acc']:.4f} | {t['baseline_acc']:.4f} | {points(t['margin'])} "
            f"{interval(t['interval'])} | {points(t['macro_f1_margin'])} | {wall} |")


def baseline_strength() -> str:
    """The model's linear part fitted alone beside the tuned TF-IDF LR, on samples of the two large tables
    (benchmarks.baseline_strength): validation and test accuracy on one split."""
    rows = ["| sample | linear part | val, test | TF-IDF LR | val, test | lead |", "|---|---|---|---|---|---|"]
    for name, table in (("baseline_strength_gender", "first names → gender"), ("baseline_strength_nana", "NaNa")):
        found = result(name)
        part, lr = found["linear_part"], found["lr"]
        rows.append(f"| {table}, {found['rows']:,} rows | "
                    f"{part['setting']} | {part['val_acc']:.4f}, {part['test_acc']:.4f} | {lr['setting']} | "
                    f"{lr['val_acc']:.4f}, {lr['test_acc']:.4f} | {points(100 * found['test_gap'])} |")
    return "\n".join(rows) + "\n"


def ema() -> str:
    rows = ["| split seed 0, plain model (`transfer.use=never`) | val acc | test acc | test macro-F1 | margin over the "
            "n-gram baseline |", "|---|---|---|---|---|"]
    for name, what in (("default_run_plain", "default callbacks"), ("ema", "`callbacks=ema`")):
        run = recorded(name)
        metrics, margin = run["figures"]["metrics"], run["figures"]["margin"]
        rows.append(f"| {what} | {metrics['val/acc_best']:.4f} | {metrics['test/acc']:.4f} | "
                    f"{metrics['test/macro_f1']:.4f} | {points(100 * margin['margin'])} "
                    f"{interval([100 * x for x in margin['interval']])} |")
    return "\n".join(rows) + "\n"


def ensemble() -> str:
    rows = ["| split seed 0 | networks served | val acc | test acc | test macro-F1 | margin over the n-gram baseline "
            "| whole run |", "|---|---|---|---|---|---|---|"]
    lines = []
    for single, many, kind in (("default_run", "ensemble", "from the starting point"),
                               ("default_run_plain", "ensemble_plain", "plain, `transfer.use=never`")):
        tried = ensemble_tries(recorded(many)["figures"]["metrics"])
        served = int(recorded(many)["figures"]["metrics"]["ensemble/members"])
        for name, what, size, val in ((single, f"one network, {kind}", 1, tried[0][1]),
                                      (many, f"`ensemble.members=3`, {kind}", served, tried[served - 1][1])):
            run = recorded(name)
            figures, margin = run["figures"]["metrics"], run["figures"]["margin"]
            rows.append(f"| {what} | {size} | {val:.4f} | {figures['test/acc']:.4f} | "
                        f"{figures['test/macro_f1']:.4f} | {points(100 * margin['margin'])} "
                        f"{interval([100 * x for x in margin['interval']])} | {run['seconds']:.0f} s |")
        lines.append(f"{kind}: {', '.join(f'{value:.4f}' for _, value in tried)} for the first "
                     f"{', '.join(str(k) for k, _ in tried)} networks, {served} served "
                     f"(`{recorded(many)['command']}`)")
    return "\n".join(rows) + "\n\nValidation accuracy, " + "; ".join(lines) + ".\n"


def ensemble_tries(metrics: dict) -> list[tuple[int, float]]:
    return sorted((int(key.rsplit("_", 1)[1]), value) for key, value in metrics.items()
                  if key.startswith("ensemble/val_acc_"))


def speed_variants(name: str) -> str:
    """benchmarks.train_speed's variants side by side: names/s, its ratio, validation accuracy, fit and wall."""
    figures = result(name)
    rows = ["| loop, batch, lr | median epoch names/s (mean of seeds) | ratio | val acc (mean) | fit s | run s |",
            "|---|---|---|---|---|---|"]
    for variant in figures["variants"].values():
        setting = dict(override.split("=", 1) for override in variant["overrides"])
        loop = f"{setting['model.impl']}, {setting['data.batch_size']}, {setting.get('model.optimizer.lr', '3e-3')}"
        rows.append(f"| {loop} | {variant['mean_names_per_s']:,.0f} | {variant['names_per_s_ratio']:.2f}x | "
                    f"{variant['mean_val_acc']:.4f} | {variant['mean_fit_s']:.0f} | {variant['mean_wall_s']:.0f} |")
    seeds = ", ".join(str(seed) for seed in figures["seeds"])
    return "\n".join(rows) + f"\n\nTraining seeds {seeds}, each variant in turn; `{recorded(name)['command']}`.\n"


def step_profiles() -> str:
    """Where a training step's time goes, per tier (benchmarks.train_speed --profile)."""
    figures = result("step_profiles")
    rows = ["| tier (table) | names/s | loader | forward | backward | optimizer | products | n-gram table | "
            "elementwise | interpreter | operators a step |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, variant in figures["variants"].items():
        run, setting = variant["runs"][0], dict(override.split("=", 1) for override in variant["overrides"])
        phases, ops = run["phases"], run["operators"]
        table = Path(setting["data.path"]).name if "data.path" in setting else setting.get("experiment", "the corpus")
        rows.append(f"| {name} ({table}) | {run['names_per_s']:,.0f} | " + " | ".join(f"{phases[p]:.0%}" for p in (
            "loader", "forward", "backward", "optimizer")) + " | " + " | ".join(f"{ops.get(k, 0):.0%}" for k in (
                "products", "ngram_table", "elementwise", "python")) + f" | {run['operator_calls_per_step']:,} |")
    return "\n".join(rows) + ("\n\nLoader to optimizer: shares of a step's wall clock; products to interpreter: "
                               f"shares of the operators' own time. `{recorded('step_profiles')['command']}`.\n")


def run_time(name: str = "default_run") -> str:
    """Where a recorded run's wall went: fitting, then each step after it (train.log's "took" lines)."""
    whole = recorded(name)
    metrics, wall = whole["figures"]["metrics"], whole["seconds"]
    seconds, networks = fit_seconds(metrics)
    steps = [(f"training ({networks} networks)" if networks > 1 else "training", seconds), *step_seconds(metrics)]
    rows = ["| part of the run | seconds | share of the run |", "|---|---|---|"]
    rows += [f"| {part} | {seconds:.1f} | {seconds / wall:.0%} |" for part, seconds in steps]
    rest = wall - sum(seconds for _, seconds in steps)
    rest_is = "the rest (start-up, data, loading the starting point, checkpoints)"
    rows.append(f"| {rest_is} | {rest:.1f} | {rest / wall:.0%} |")
    return "\n".join(rows) + f"\n\n{wall:.0f} s in all: `{whole['command']}`.\n"


def name_parts() -> str:
    """NaNa read as parts beside NaNa as one string, on one split (benchmarks.parts_check)."""
    f, run = result("parts_nana"), recorded("parts_nana")
    rows = ["| NaNa sample read as | validation accuracy | test P@1 | test P@5 | its hashed n-gram baseline P@1 "
            "| P@5 |", "|---|---|---|---|---|---|"]
    for join, shown in (("boundary", "parts, a boundary token between them"), ("space", 'one string, "Given Family"')):
        r = f[join]
        rows.append(f"| {shown} | {r['val_acc']:.4f} | {r['p_at_1']:.4f} | {r['p_at_5']:.4f} | "
                    f"{r['baseline_p_at_1']:.4f} | {r['baseline_p_at_5']:.4f} |")
    parse = f["parse"]
    return "\n".join(rows) + (
        f"\n\n{f['boundary']['test_names']:,} test names, the same in both runs (a {f['rows']:,}-row sample, "
        f"{parse['rows']:,} rows after dropping labels with too few rows). Parts minus one string: P@1 "
        f"{points(100 * f['p_at_1_difference'])} points, 95 % paired interval "
        f"{interval([100 * x for x in f['p_at_1_interval']])}; P@5 {points(100 * f['p_at_5_difference'])} "
        f"{interval([100 * x for x in f['p_at_5_interval']])}. nameparser left {100 * parse['one_part_share']:.1f} % "
        f"of the distinct names in one part and read {100 * parse['comma_share']:.1f} % as \"Family, Given\". "
        f"Both runs: {run['seconds'] / 60:.0f} minutes on {run['machine'].split(',')[1].strip()} "
        f"(`{run['command']}`).")


BLOCKS: dict[str, Callable[[], str]] = {
    "default_run": default_run, "headline": headline, "nine_runs": nine_runs, "seeds": seeds,
    "gender": gender, "nana": nana, "nana_at_k": nana_at_k,
    "nana_run": nana_run, "nana_plain": nana_plain, "pretrain_hidden": pretrain_hidden,
    "score_scale": score_scale, "composition": composition, "gradient_check": gradient_check,
    "set_kinds": set_kinds, "h200": h200, "serve_load": serve_load, "ray": ray, "pretrain": pretrain,
    "transfer_default": transfer_default, "transfer_tables": transfer_tables, "ema": ema, "ensemble": ensemble,
    "speed_small_transferred": lambda: speed_variants("speed_small_transferred"),
    "speed_small_plain": lambda: speed_variants("speed_small_plain"), "step_profiles": step_profiles,
    "run_time": run_time, "name_parts": name_parts,
    "audit_tables": audit_tables, "audit_models": audit_models,
    "audit_scale": audit_scale, "baseline_strength": baseline_strength}


def show(name: str, *args: str) -> None:
    import cog

    cog.out(output(*args) if name == "output" else BLOCKS[name]())
