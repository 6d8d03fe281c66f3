"""A write that fails half-way loses nothing: each writer runs in a child process under a real file-size limit
(RLIMIT_FSIZE, with SIGXFSZ ignored so the write fails with EFBIG, as on a full disk), and must leave the previous
file byte-identical, no file or temporary file of its own behind, one line naming the file, and a non-zero exit."""

from __future__ import annotations

import resource
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import ROOT, TINY, run_dirs, write_corpus

PREVIOUS = b"the previous file\n"


def limited(max_bytes: int):
    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_bytes, max_bytes))
    return limit


def run_limited(args: list[str], cwd: Path, max_bytes: int, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          preexec_fn=limited(max_bytes))


def refused_in_one_line(result: subprocess.CompletedProcess, target: Path) -> None:
    assert result.returncode == 1, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and lines[0].startswith(f"error: cannot write {target}") and "File too large" in lines[0]
    assert "Traceback" not in result.stderr


def no_leftovers(folder: Path) -> None:
    assert not [path.name for path in folder.rglob(".*.tmp*")], "a temporary file was left behind"


@pytest.fixture(scope="module")
def checkpoint(trained) -> Path:
    return trained[0] / "checkpoints" / "refit.ckpt"


@pytest.fixture(scope="module")
def people(trained, tmp_path_factory) -> dict[str, Path]:
    """A table of 30,000 rows whose scored copy is well over the limit, as CSV and Parquet."""
    folder = tmp_path_factory.mktemp("people")
    names = sorted({line for path in trained[1].glob("*.txt") for line in path.read_text().splitlines()})
    cells = [names[i] for i in np.random.default_rng(0).integers(0, len(names), 30_000)]
    table = pa.table({"id": np.arange(len(cells)), "surname": cells})
    pq.write_table(table, folder / "people.parquet")
    (folder / "people.csv").write_text("id,surname\n" + "".join(f"{i},{n}\n" for i, n in enumerate(cells)))
    return {"csv": folder / "people.csv", "parquet": folder / "people.parquet"}


@pytest.mark.parametrize("suffix", ["csv", "parquet"])
def test_a_scored_table_that_cannot_be_written_leaves_the_previous_one(checkpoint, people, tmp_path, suffix):
    out = tmp_path / f"scored.{suffix}"
    out.write_bytes(PREVIOUS)
    result = run_limited(["-m", "nameorigin", "predict", str(checkpoint), "--file", str(people[suffix]),
                          "--column", "surname", "--out", str(out)], tmp_path, 64 * 1024)
    refused_in_one_line(result, out)
    assert out.read_bytes() == PREVIOUS
    no_leftovers(tmp_path)


def test_an_export_that_cannot_be_written_leaves_the_previous_program(checkpoint, tmp_path):
    program = tmp_path / "model.pt2"
    program.write_bytes(PREVIOUS)
    result = run_limited(["-m", "nameorigin", "export", str(checkpoint), "--out", str(tmp_path / "model"),
                          "--formats", "pt2"], tmp_path, 32 * 1024)
    refused_in_one_line(result, program)
    assert program.read_bytes() == PREVIOUS and not (tmp_path / "model.json").exists()
    no_leftovers(tmp_path)


def test_a_converted_table_that_cannot_be_written_leaves_the_previous_csv(tmp_path):
    """The converters write through the same atomic writer: the first-names CSV, from a small source."""
    script = ("import gzip, itertools, pickle\n"
              "from pathlib import Path\n"
              "from nameorigin.base.errors import exits_2_on_user_error\n"
              "from nameorigin.data.first_names import convert_first_names\n"
              "source = Path('first_names.pkl.gz')\n"
              "letters = itertools.islice(itertools.product('abcdefghij', repeat=5), 20000)\n"
              "raw = {''.join(n).title(): {'gender': {'F': 0.6, 'M': 0.4}} for n in letters}\n"
              "exits_2_on_user_error(convert_first_names)(Path('out/gender.csv'), source) if source.exists() else "
              "gzip.open(source, 'wb').write(pickle.dumps(raw))\n")
    assert subprocess.run([sys.executable, "-c", script], cwd=tmp_path).returncode == 0  # the source, unlimited
    out = tmp_path / "out" / "gender.csv"
    out.parent.mkdir()
    out.write_bytes(PREVIOUS)
    result = run_limited(["-c", script], tmp_path, 64 * 1024)
    refused_in_one_line(result, out.relative_to(tmp_path))
    assert out.read_bytes() == PREVIOUS
    no_leftovers(tmp_path)


@pytest.mark.slow
def test_a_run_whose_checkpoint_cannot_be_written_says_so_and_keeps_its_folder(tmp_path):
    """The checkpoint is the largest file a run writes: under a limit below its size the run stops with one line
    naming it, exit 1, no checkpoint file under its name, and the run folder (its log, config, split) kept."""
    corpus = write_corpus(tmp_path / "names")
    result = run_limited([str(ROOT / "train.py"), f"data.root={corpus}", *TINY, "model.hidden_size=96",
                          "callbacks.dashboard=null"], tmp_path, 160 * 1024)
    run = run_dirs(tmp_path)[-1]
    refused_in_one_line(result, run / "checkpoints" / "best.ckpt")
    assert (run / "split.json").is_file() and not list(run.rglob("*.ckpt"))
    no_leftovers(tmp_path)


def test_a_folder_of_files_is_replaced_whole_or_not_at_all(tmp_path):
    """Ray Data writes its output as a folder of files: written into a folder beside it that then takes its
    place, so a worker's failed write (here a real EFBIG) leaves the previous folder as it was."""
    out = tmp_path / "scored"
    out.mkdir()
    (out / "part-0.parquet").write_bytes(PREVIOUS)
    script = ("from pathlib import Path\n"
              "from nameorigin.base.atomic import write_folder_atomically\n"
              "from nameorigin.base.errors import exits_2_on_user_error\n"
              "def write(folder):\n"
              "    folder.mkdir()\n"
              "    (folder / 'part-0.parquet').write_bytes(b'x' * 10)\n"
              "    (folder / 'part-1.parquet').write_bytes(b'x' * 200_000)\n"
              "exits_2_on_user_error(write_folder_atomically)(Path('scored'), write)\n")
    result = run_limited(["-c", script], tmp_path, 64 * 1024)
    refused_in_one_line(result, Path("scored"))
    assert [p.name for p in out.iterdir()] == ["part-0.parquet"] and (out / "part-0.parquet").read_bytes() == PREVIOUS
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scored"]  # no temporary folder left
