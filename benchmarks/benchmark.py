"""Side-by-side speed of the cell loop, torch's fused RNNs, the tutorial's style, logging and inference.

Everything is measured in this one process on the same batches, alternating the contenders, median of
--repeats; the table prints ratios against fused torch.

  python -m benchmarks.benchmark                               # synthetic names shaped like the corpus
  python -m benchmarks.benchmark --data <folder>   # <Language>.txt files: time-to-85% and the n-gram baseline too
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks.fast_path import bench_fast_path
from benchmarks.speed import FusedClassifier, TutorialRNN, alternate, char_rnn, make_batches, train_run
from nameorigin.base.errors import UserError, exits_2_on_user_error
from nameorigin.config import Cell, ModelConfig, plain
from nameorigin.model.cells import CELLS
from nameorigin.serving.predict import resolve_device

# The accuracy part runs the clone's train.py (benchmarks/ -> the repository root).
TRAIN = Path(__file__).resolve().parents[1] / "train.py"
PARTS = ("train", "tutorial", "logging", "predict", "accuracy")
DEFAULT_CELL = ModelConfig().cell


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", help="folder of <Language>.txt files (default: synthetic names)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or auto (default cpu)")
    parser.add_argument("--batch-size", type=int, default=128, help="names per training batch (default 128)")
    parser.add_argument("--hidden-size", type=int, default=256, help="hidden units (default 256)")
    parser.add_argument("--embedding-dim", type=int, default=64, help="embedding size (default 64)")
    parser.add_argument("--ngram-buckets", type=int, default=65536,
                        help="n-gram head of the Predictor's model (default 65536, as the default config)")
    parser.add_argument("--batches", type=int, default=40, help="training batches per timed run (default 40)")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per contender (default 5)")
    parser.add_argument("--predict-names", type=int, default=100_000,
                        help="names the Predictor part answers per timed run (default 100000)")
    parser.add_argument("--every-n-steps", type=int, default=50, help="grad-accumulation logging interval")
    parser.add_argument("--cells", default=",".join(CELLS),
                        help=f"comma-separated cells (default {','.join(CELLS)}: every cell of the registry)")
    parser.add_argument("--skip", default="",
                        help=f"comma-separated parts to skip: {','.join(PARTS)}")
    parser.add_argument("--json", action="store_true", help="print the results as JSON instead of a table")
    args = parser.parse_args(argv)
    for flag in ("batch_size", "hidden_size", "batches", "repeats", "every_n_steps", "predict_names"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} {getattr(args, flag)} must be at least 1")
    if args.embedding_dim < 0:
        parser.error(f"--embedding-dim {args.embedding_dim} must be >= 0 (0 means one-hot input)")
    if args.ngram_buckets < 0:
        parser.error(f"--ngram-buckets {args.ngram_buckets} must be >= 0 (0 means no n-gram head)")
    try:  # the Predictor's rule, so --device means the same in every script
        args.device = resolve_device(args.device)
    except UserError as error:
        parser.error(str(error))
    unknown = set(args.skip.split(",")) - {"", *PARTS}
    if unknown:
        parser.error(f"--skip {','.join(sorted(unknown))}: choose from {','.join(PARTS)}")
    return args


def corpus_names(data: str | None, count: int = 20_000, seed: int = 0) -> list[str]:
    if data:
        from nameorigin.data.corpus import read_corpus

        return [name for name, _ in read_corpus(data)[0]]
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    return ["".join(rng.choice(letters) for _ in range(max(2, int(rng.gauss(7, 2))))).capitalize()
            for _ in range(count)]


def bench_training(args: argparse.Namespace, names: list[str]) -> dict:
    vocab, results = 60, {}
    batches = make_batches(names, args.batch_size, args.batches, vocab)
    for cell in args.cells.split(","):
        torch.manual_seed(0)
        models = {
            "loop (autograd)": char_rnn(vocab, cell, args.hidden_size, args.embedding_dim).to(args.device),
            "loop (bptt)": char_rnn(vocab, cell, args.hidden_size, args.embedding_dim, "bptt").to(args.device),
            "fused torch": FusedClassifier(cell, vocab, 18, args.hidden_size, args.embedding_dim).to(args.device),
        }
        speeds = alternate({k: (lambda m=m: train_run(m, batches, args.device)) for k, m in models.items()},
                           args.repeats)
        results[cell] = {k: {"names_per_s": v, "vs_fused": v / speeds["fused torch"]} for k, v in speeds.items()}
    if args.device.startswith("cuda"):
        results.update(bench_fast_path(args, names, vocab))
    return results


def bench_logging(args: argparse.Namespace, names: list[str]) -> dict:
    """Overhead of the gradient-accumulation logger's work at its interval, on the default model's cell."""
    vocab = 60
    batches = make_batches(names, args.batch_size, max(args.batches, args.every_n_steps), vocab, seed=1)
    results = {}
    for impl in ("autograd", "bptt"):
        torch.manual_seed(0)
        model = char_rnn(vocab, DEFAULT_CELL, args.hidden_size, args.embedding_dim, impl).to(args.device)
        speeds = alternate({"off": lambda m=model: train_run(m, batches, args.device),
                            "on": lambda m=model: train_run(m, batches, args.device, args.every_n_steps)},
                           args.repeats)
        results[impl] = {"off": speeds["off"], "on": speeds["on"], "overhead": 1 - speeds["on"] / speeds["off"]}
    return results


def bench_tutorial(args: argparse.Namespace, names: list[str], sample: int = 500) -> dict:
    """The tutorial's loop (one name per step, SGD) against the same Elman/one-hot/hidden-128 setup batched
    through this project's cell loop."""
    vocab = 60
    torch.manual_seed(0)
    rng = random.Random(2)
    picked = rng.sample(names, sample)
    model = TutorialRNN(vocab, 128, 18)
    start = time.perf_counter()
    for name in picked:
        model.zero_grad()
        F.nll_loss(model([2 + ord(c) % (vocab - 2) for c in name]), torch.tensor([rng.randrange(18)])).backward()
        with torch.no_grad():
            for p in model.parameters():
                p.add_(p.grad, alpha=-0.005)
    tutorial = sample / (time.perf_counter() - start)
    batches = make_batches(names, args.batch_size, args.batches, vocab, seed=2)
    batched = char_rnn(vocab, Cell.rnn, 128, 0, "bptt").to(args.device)
    same_model = statistics.median(train_run(batched, batches, args.device) for _ in range(args.repeats))
    return {"names_per_s": tutorial, "same_model_batched_names_per_s": same_model}


def bench_predict(args: argparse.Namespace, names: list[str]) -> dict:
    from nameorigin.model.artifacts import ServingMeta
    from nameorigin.serving.predict import Predictor

    count = args.predict_names
    torch.manual_seed(0)
    vocab = ["<pad>", "<unk>", *sorted({c for n in names for c in n})]
    # The default model: its cell with the hashed n-gram head.
    net = char_rnn(len(vocab), DEFAULT_CELL, args.hidden_size, args.embedding_dim, ngram_buckets=args.ngram_buckets)
    predictor = Predictor(net, ServingMeta(vocab, [f"L{i}" for i in range(18)]), device=args.device)
    many = (names * (count // len(names) + 1))[:count]

    def rate(served: Predictor) -> float:
        served.predict(many[:2000])
        speeds = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            served.predict(many, top_k=3)
            speeds.append(count / (time.perf_counter() - start))
        return statistics.median(speeds)

    speed, exported = rate(predictor), {}
    explained = many[:20_000]  # --explain: the parts, the per-character totals and the residual of every name
    predictor.predict(explained[:1000], explain=True)
    explain_speeds = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        predictor.predict(explained, top_k=3, explain=True)
        explain_speeds.append(len(explained) / (time.perf_counter() - start))
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = Path(tmp) / "bench.ckpt"
        torch.save({"hyper_parameters": {"vocab": vocab, "labels": predictor.labels, "config": plain(net.config)},
                    "state_dict": {f"net.{k}": v for k, v in net.state_dict().items()}}, checkpoint)
        try:
            from nameorigin.serving.export import export_model

            for path in export_model(predictor, Path(tmp) / "model")[:-1]:  # the .pt2 and the .onnx
                exported[path.suffix[1:]] = rate(Predictor.load(path))
        except ImportError:  # onnx is the optional [export] extra
            pass
        script = [sys.executable, "-m", "nameorigin", "predict", str(checkpoint)]  # what nameorigin predict runs
        colds = []
        for _ in range(3):
            start = time.perf_counter()
            subprocess.run([*script, "Nakamura"], check=True, capture_output=True)
            colds.append(time.perf_counter() - start)
        names_file = Path(tmp) / "names.txt"
        names_file.write_text("\n".join(many) + "\n", encoding="utf-8")
        start = time.perf_counter()  # the whole CLI: process start, reading, predicting, writing the CSV
        subprocess.run([*script, "--file", str(names_file), "--format", "csv"], check=True, stdout=subprocess.DEVNULL)
        file_seconds = time.perf_counter() - start
    return {"names": count, "names_per_s": speed, "explain_names_per_s": statistics.median(explain_speeds),
            "cold_start_s": statistics.median(colds),
            "script_file_s": file_seconds, "exported_names_per_s": exported}


def bench_accuracy(args: argparse.Namespace, target: float = 0.85) -> dict:
    """Wall time for the default `python train.py` to reach `target` validation accuracy on --data, and the
    char-n-gram logistic-regression baseline on the same split (needs the [bench] extra: scikit-learn)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    if not TRAIN.is_file():
        raise UserError("--data runs the accuracy part with a checkout's train.py: run the benchmark from a clone, "
                        "or pass --skip accuracy")
    with tempfile.TemporaryDirectory() as tmp:
        start = time.time()
        # refit.enabled=false: the clock is for reaching the target on validation, which the refit does not touch
        subprocess.run([sys.executable, str(TRAIN), f"data.root={args.data}", "test=false",
                        "refit.enabled=false", "callbacks.progress_bar=null"], cwd=tmp, check=True, capture_output=True)
        total = time.time() - start
        (run,) = Path(tmp).glob("outputs/*/*")
        curve = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0}).Reload().Scalars("val/acc")
    reached = next((e.wall_time - start for e in curve if e.value >= target), None)
    result = {"target": target, "seconds_to_target": reached, "best_val_acc": max(e.value for e in curve),
              "train_seconds": total}
    from nameorigin.evaluation.baselines import tfidf_baseline

    result["baseline"] = tfidf_baseline(args.data)
    return result


def table(results: dict, args: argparse.Namespace) -> str:
    lines = [f"device {args.device}, {torch.get_num_threads()} threads, batch {args.batch_size}, "
             f"hidden {args.hidden_size}, embedding {args.embedding_dim}, median of {args.repeats}", ""]
    default_model = None
    if "train" in results:
        lines.append(f"{'training throughput':<32}{'names/s':>10}{'vs fused':>10}")
        for cell, rows in results["train"].items():
            for name, row in rows.items():
                lines.append(f"  {cell + ' ' + name:<30}{row['names_per_s']:>10.0f}{row['vs_fused']:>9.2f}x")
        default_model = results["train"].get(DEFAULT_CELL.value, {}).get("loop (bptt)", {}).get("names_per_s")
    if "tutorial" in results:
        speed, same = results["tutorial"]["names_per_s"], results["tutorial"]["same_model_batched_names_per_s"]
        lines += ["", f"the tutorial's loop, one name per step: {speed:.0f} names/s",
                  f"  same model (Elman, one-hot, hidden 128) batched through the cell loop: {same:.0f} names/s, "
                  f"{same / speed:.0f}x"]
        if default_model:
            lines.append(f"  the default model ({DEFAULT_CELL} {args.hidden_size}, bptt): {default_model:.0f} names/s, "
                         f"{default_model / speed:.0f}x")
    if "logging" in results:
        lines += ["", f"grad-accumulation logging every {args.every_n_steps} steps (gru):"]
        for impl, row in results["logging"].items():
            lines.append(f"  {impl:<9} off {row['off']:.0f} names/s, on {row['on']:.0f} names/s, "
                         f"overhead {row['overhead']:.1%}")
    if "predict" in results:
        row = results["predict"]
        lines += ["", f"Predictor on {row['names']} names: {row['names_per_s']:.0f} names/s; "
                  f"cold start of nameorigin predict for one name: {row['cold_start_s']:.2f} s",
                  f"  nameorigin predict --file (same names, one per line) --format csv: {row['script_file_s']:.1f} s "
                  f"end to end, {row['names'] / row['script_file_s']:.0f} names/s including the process start",
                  f"  with explain=True (--explain), 20000 of them: {row['explain_names_per_s']:.0f} names/s, "
                  f"{row['explain_names_per_s'] / row['names_per_s']:.2f}x the plain Predictor"]
        for fmt, value in row.get("exported_names_per_s", {}).items():
            runtime = "onnxruntime" if fmt == "onnx" else "torch.export program"
            lines.append(f"  the same model exported, {runtime} (.{fmt}) behind the Predictor: {value:.0f} names/s, "
                         f"{value / row['names_per_s']:.2f}x the checkpoint")
    if "accuracy" in results:
        row = results["accuracy"]
        when = (f"reached after {row['seconds_to_target']:.0f} s" if row["seconds_to_target"] is not None
                else "not reached")
        lines += ["", f"default training to {row['target']:.0%} val accuracy: {when} (best {row['best_val_acc']:.4f}, "
                  f"whole run {row['train_seconds']:.0f} s)"]
        base = row["baseline"]
        lines.append(f"  char-n-gram logistic regression (C={base['C']:g}, {base['seconds']:.0f} s): val "
                     f"{base['val_acc']:.4f}, test {base['test_acc']:.4f}, macro-F1 {base['test_macro_f1']:.4f}")
    return "\n".join(lines)


@exits_2_on_user_error
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    unknown = [c for c in args.cells.split(",") if c not in CELLS]
    if unknown:
        print(f"error: --cells {','.join(unknown)}: choose from {', '.join(CELLS)}", file=sys.stderr)
        return 2
    if args.data:
        # train.py runs in a scratch folder for the accuracy part, so a relative --data must be made absolute.
        if not Path(args.data).is_dir():
            print(f"error: --data {args.data} is not a folder: pass a folder of <Language>.txt files", file=sys.stderr)
            return 2
        args.data = str(Path(args.data).resolve())
    skip = set(args.skip.split(",")) - {""}
    try:
        names = corpus_names(args.data)
    except UserError as error:  # a folder without <Language>.txt files, a non-UTF-8 file, ...
        print(f"error: --data: {error}", file=sys.stderr)
        return 2
    results: dict = {}
    if "train" not in skip:
        results["train"] = bench_training(args, names)
    if "tutorial" not in skip:
        results["tutorial"] = bench_tutorial(args, names)
    if "logging" not in skip:
        results["logging"] = bench_logging(args, names)
    if "predict" not in skip:
        results["predict"] = bench_predict(args, names)
    if args.data and "accuracy" not in skip:
        results["accuracy"] = bench_accuracy(args)
    print(json.dumps(results, indent=1) if args.json else table(results, args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
