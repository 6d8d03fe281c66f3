"""Scoring with Ray Data on a local cluster (nameorigin.serving.ray_data, nameorigin ray-score): the same answers as
predict_frame on the same rows, one-line refusals, and Ray kept out of every other import."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_big_tables import zipf_people

from nameorigin.base.errors import UserError
from nameorigin.cli.app import main as nameorigin
from nameorigin.serving.frame import predict_frame
from nameorigin.serving.predict import Predictor
from nameorigin.serving.ray_data import ActorPool, NameScorer, score_dataset, user_error_of

ray = pytest.importorskip("ray", reason="the [ray] extra is not installed: pip install 'nameorigin[ray]'")


@pytest.fixture(scope="module")
def cluster():
    """A local two-CPU cluster with a small object store, shut down whatever the tests do."""
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=150 * 2**20, log_to_driver=False,
             configure_logging=False)
    try:
        yield
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def checkpoint(trained):
    return trained[0] / "checkpoints" / "refit.ckpt"


@pytest.fixture(scope="module")
def people(trained, tmp_path_factory):
    path = tmp_path_factory.mktemp("ray") / "people.parquet"
    cells = zipf_people(trained[1], 10_000, seed=3)
    pq.write_table(pa.table({"person_id": range(len(cells)), "surname": pa.array(cells, pa.string())}), path,
                   row_group_size=2_500)
    return path


@pytest.mark.slow
def test_ray_scores_every_row_as_predict_frame_does(cluster, checkpoint, people, tmp_path):
    """10,000 rows in batches of 3,000 over two actors, the model shipped through the object store: every row back
    in order, with predict_frame's columns and answers."""
    out = tmp_path / "scored"
    score_dataset(checkpoint, str(people), str(out), "surname",
                  ActorPool(concurrency=2, batch_rows=3_000, threads=1, ship_model=True), top_k=2, coverage=0.9)
    ours = pd.read_parquet(out)
    theirs = predict_frame(pd.read_parquet(people), "surname", Predictor.load(checkpoint), top_k=2, coverage=0.9,
                           markers=True)
    assert len(ours) == 10_000 and list(ours.columns) == list(theirs.columns)
    assert ours["person_id"].tolist() == list(range(10_000))
    probabilities = [c for c in theirs.columns if c.startswith("pred_probability")]
    pd.testing.assert_frame_equal(ours.drop(columns=probabilities), theirs.drop(columns=probabilities),
                                  check_dtype=False)
    assert (ours[probabilities] - theirs[probabilities]).abs().max().max() <= 1e-6
    assert ours["pred_reason_code"].eq("unusable_input").any()  # the blanks, nulls and markers of zipf_people


@pytest.mark.slow
@pytest.mark.parametrize("problem", ["missing checkpoint", "missing column", "unstored coverage", "too many actors"])
def test_a_bad_job_is_one_line_and_exit_2(cluster, checkpoint, people, tmp_path, capsys, problem):
    model = str(tmp_path / "gone.ckpt") if problem == "missing checkpoint" else str(checkpoint)
    column = "given_name" if problem == "missing column" else "surname"
    extra = {"unstored coverage": ["--coverage", "0.42"], "too many actors": ["--concurrency", "3"]}.get(problem, [])
    with pytest.raises(SystemExit) as exit_info:
        nameorigin(["ray-score", model, str(people), str(tmp_path / "out"), "--column", column, *extra])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    assert {"missing checkpoint": "does not exist", "missing column": "'given_name' is not in",
            "unstored coverage": "0.42 is not a level",
            "too many actors": "need 3 CPUs and the cluster has 2"}[problem] in err
    assert not (tmp_path / "out").exists()


def test_a_users_mistake_inside_an_actor_is_found_under_rays_wrapping():
    class Wrapped(Exception):
        def __init__(self, cause):
            self.cause = cause

    mistake = UserError("column 'surname' is not in the frame")
    assert user_error_of(Wrapped(Wrapped(mistake))) is mistake
    try:
        raise RuntimeError("worker died") from mistake
    except RuntimeError as error:
        assert user_error_of(error) is mistake
    assert user_error_of(RuntimeError("a bug")) is None


def test_a_per_batch_prior_estimate_is_refused(checkpoint):
    with pytest.raises(UserError, match="estimate it once over the dataset"):
        NameScorer(checkpoint, "surname", prior="estimate")


def test_importing_nameorigin_does_not_import_ray():
    code = ("import sys, nameorigin, nameorigin.serving.ray_data, nameorigin.cli.ray_score, nameorigin.cli.predict; "
            "from nameorigin import Predictor, predict_frame; print('ray' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


@pytest.mark.slow
def test_ray_score_takes_a_names_parts_as_columns(cluster, parts_model, parts_runs, tmp_path):
    """nameorigin ray-score --column given --column family on a model of parts: predict_frame's answers; the
    wrong number of columns is refused in one line before any actor starts."""
    frame = pd.read_csv(parts_runs["table"])
    source, out = tmp_path / "people.parquet", tmp_path / "scored"
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), source)
    assert nameorigin(["ray-score", str(parts_model), str(source), str(out), "--column", "given", "--column",
                       "family"]) == 0
    theirs = predict_frame(frame, ["given", "family"], Predictor.load(parts_model))
    assert abs(pd.read_parquet(out)["pred_probability"].to_numpy() - theirs["pred_probability"].to_numpy()).max() \
        < 1e-6
    with pytest.raises(UserError, match="reads a name as 2 parts"):
        score_dataset(parts_model, str(source), str(tmp_path / "refused"), ["given", "family", "origin"])
