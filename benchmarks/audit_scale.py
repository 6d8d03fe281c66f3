"""What `nameorigin audit` costs on a whole table with its defaults: the command run in this process on a table,
its seconds (reading, out-of-sample probabilities, the cut, writing) and the process' peak resident memory.

  nameorigin nana-table --fetch
  python -m benchmarks.audit_scale --table data/nana/nana.csv --label-column nationality
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.score_scale import peak_rss_gb
from nameorigin.cli.app import main as nameorigin


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--table", required=True, help="the table audited (CSV, TSV, Parquet, JSON Lines)")
    parser.add_argument("--name-column", default="name", help="its name column (default name)")
    parser.add_argument("--label-column", default="label", help="its label column (default label)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        out, said = Path(folder, "suspects.csv"), io.StringIO()
        started = time.perf_counter()
        with contextlib.redirect_stderr(said):
            code = nameorigin(["audit", args.table, "--name-column", args.name_column, "--label-column",
                               args.label_column, "--out", str(out)])
        seconds = time.perf_counter() - started
        suspects = sum(1 for _ in out.open(encoding="utf-8")) - 1
    print(json.dumps({"exit": code, "seconds": seconds, "peak_rss_gb": peak_rss_gb(), "suspects": suspects,
                      "said": said.getvalue().strip().replace(str(out), out.name)}, indent=1))
    return code


if __name__ == "__main__":
    sys.exit(main())
