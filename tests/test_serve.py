"""nameorigin serve over real HTTP: the server runs as a subprocess on a free port of 127.0.0.1 (as a user starts
it), is polled on /health, and is killed with its process group at the end. Its answers equal
`nameorigin predict --format json` for a .ckpt and an .onnx; bad requests are one-line 4xx and leave it serving;
requests batched together keep their own options; the API key guards /predict only."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from nameorigin.cli.predict import main as predict_main

pytest.importorskip("litserve", reason="the [serve] extra is not installed: pip install 'nameorigin[serve]'")

from benchmarks.serve_load import free_port, start_server, stop_server  # noqa: E402
from nameorigin.cli.app import main as nameorigin  # noqa: E402
from nameorigin.serving.export import export_model  # noqa: E402
from nameorigin.serving.predict import Predictor  # noqa: E402

KEY = "correct horse battery staple"
NAMES = ["Nakamura", "Virtanen", "O'Brien", "", "x" * 80, "Kanémoto"]


@pytest.fixture(scope="module", params=["ckpt", "onnx"])
def served(request, trained, tmp_path_factory):
    """(base URL, model path): the tiny run's refit.ckpt, or its ONNX export, behind a server that needs KEY."""
    model = trained[0] / "checkpoints" / "refit.ckpt"
    if request.param == "onnx":
        pytest.importorskip("onnxruntime")
        stem = tmp_path_factory.mktemp("served") / "model"
        export_model(Predictor.load(model), stem, ("onnx",))
        model = stem.with_suffix(".onnx")
    port = free_port()
    server = start_server(str(model), port, [], env={**os.environ, "NAMEORIGIN_API_KEY": KEY})
    try:
        yield f"http://127.0.0.1:{port}", model
    finally:
        stop_server(server)


def post(base: str, body: bytes | dict, key: str | None = KEY, path: str = "/predict") -> tuple[int, dict]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"Content-Type": "application/json", **({"X-API-Key": key} if key is not None else {})}
    try:
        with urllib.request.urlopen(urllib.request.Request(base + path, data=data, headers=headers), timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


def get(base: str, path: str) -> tuple[int, str, dict]:
    try:
        with urllib.request.urlopen(base + path, timeout=30) as answer:
            return answer.status, answer.read().decode(), dict(answer.headers)
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(), dict(error.headers)


def cli_json(model: Path, capsys, *flags: str) -> list[dict]:
    capsys.readouterr()
    assert predict_main([str(model), *NAMES, "--format", "json", *flags]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.slow
def test_answers_equal_the_predict_commands_json(served, capsys):
    base, model = served
    for body, flags in (({"names": NAMES}, []), ({"names": NAMES, "top_k": 2, "coverage": 0.9},
                                                 ["--top-k", "2", "--coverage", "0.9"])):
        status, answer = post(base, body)
        assert status == 200
        assert answer["predictions"] == cli_json(model, capsys, *flags)
    identity = answer["model"]
    assert identity["file"] == model.name and identity["labels"] == Predictor.load(model).labels
    assert len(identity["sha256"]) == 64 and identity["version"]
    unusable = answer["predictions"][3]
    assert unusable["reason_code"] == "unusable_input" and unusable["predictions"] == []


@pytest.mark.slow
def test_bad_requests_are_one_line_4xx_and_the_server_keeps_serving(served):
    base, model = served
    bad = {
        b'{"names": ["Nakamura"': (422, "not valid JSON"),
        b'{"names": []}': (422, "names: List should have at least 1 item"),
        b'{"names": ["a"], "top_k": "3"}': (422, "top_k: Input should be a valid integer"),
        b'{"names": ["a"], "language": "en"}': (422, "language: unknown field"),
        b'{"names": ["a"], "coverage": 0.42}': (422, "coverage 0.42 is not a level stored in this model"),
        b'{"names": ["a"], "prior": {"Klingon": 1}}': (422, "Klingon are not labels of this model"),
        b'{"names": ["a"], "prior": "/etc/passwd"}': (422, "prior"),
        b'{"names": ["a", "b"], "prior": "estimate"}': (422, "needs at least 100 usable names"),
        b'["Nakamura"]': (422, "not a JSON object"),
        b'{"names": ["\xff"]}': (400, ""),
        json.dumps({"names": ["a"] * 10_001}).encode(): (422, "at most 10,000 a request"),
        # five times the limit: a server that answers before reading the rest resets the connection instead
        b'{"names": ["' + b"a" * (20 * 2**20) + b'"]}': (413, "request body too large: over 4 MiB"),
    }
    for body, (code, words) in bad.items():
        status, answer = post(base, body)
        assert status == code, (body[:60], status, answer)
        assert words in answer["detail"] and "\n" not in answer["detail"], answer
    if model.suffix == ".onnx":
        status, answer = post(base, {"names": ["a"], "explain": True})
        assert status == 422 and "explain reads the model's own layers" in answer["detail"]
    assert get(base, "/health")[0] == 200
    assert post(base, {"names": ["Nakamura"]})[0] == 200


@pytest.mark.slow
def same_answer(got: object, expected: object) -> bool:
    """Equal, probabilities to 2e-6: a name scored in another batch may differ in the last printed digit (the
    bptt loop's products take the batch's shape)."""
    if isinstance(got, dict) and isinstance(expected, dict):
        return got.keys() == expected.keys() and all(same_answer(got[k], expected[k]) for k in got)
    if isinstance(got, list) and isinstance(expected, list):
        return len(got) == len(expected) and all(map(same_answer, got, expected))
    if isinstance(got, float) and isinstance(expected, float):
        return abs(got - expected) <= 2e-6
    return got == expected


def test_requests_batched_together_keep_their_own_options(served):
    """Forty concurrent requests with six different option sets land in shared batches; each answer equals the
    same request sent alone."""
    base, model = served
    many = [f"{name}{suffix}" for name in ("Nakamura", "Rossi", "Novak", "Schmidt") for suffix in ("", "a", "o")] * 10
    options = [{"top_k": 1}, {"top_k": 3, "coverage": 0.9}, {"prior": "uniform", "top_k": 2},
               {"prior": "estimate", "names": many}, {"abstain": False, "top_k": 4},
               {"coverage": 0.8, "max_set_size": 1}]
    bodies = [{"names": NAMES[:3] + [f"Name{i}"], **options[i % len(options)]} for i in range(40)]
    alone = [post(base, body)[1] for body in bodies[:len(options)]]
    with ThreadPoolExecutor(max_workers=20) as pool:
        together = list(pool.map(lambda body: post(base, body)[1], bodies))
    for i, answer in enumerate(together):
        expected = alone[i % len(options)]
        if i >= len(options):  # the names differ in their last entry: compare the shared first three
            answer, expected = answer["predictions"][:3], expected["predictions"][:3]
        assert same_answer(answer, expected), (i, options[i % len(options)], answer, expected)
    assert "estimated_prior" in together[3] and "estimated_prior" not in together[2]


def test_the_labels_option_reaches_the_server(served):
    """A request field made from PredictOptions.labels: answers among those labels alone, as the Predictor's."""
    base, model = served
    predictor = Predictor.load(model)
    labels = list(predictor.labels[-2:])
    status, answer = post(base, {"names": NAMES[:3], "labels": labels, "top_k": 3})
    expected = [p.as_dict() for p in predictor.predict(NAMES[:3], top_k=3, labels=labels)]
    assert status == 200 and answer["predictions"] == expected
    assert all({entry[predictor.label_name] for entry in a["predictions"]} <= set(labels)
               for a in answer["predictions"])
    status, refused = post(base, {"names": ["a"], "labels": ["Klingon"]})
    assert status == 422 and refused["detail"].startswith("body: labels: Klingon not a label of this model")


@pytest.mark.slow
def test_the_key_guards_predict_only_and_the_page_and_health_stay_open(served):
    base, _ = served
    assert post(base, {"names": ["Nakamura"]}, key=None)[0] == 401
    status, answer = post(base, {"names": ["Nakamura"]}, key=KEY[:-1] + "X")
    assert status == 401 and "API key" in answer["detail"]
    assert get(base, "/health")[0] == 200
    status, page, headers = get(base, "/")
    assert status == 200 and "<html" in page.lower() and "litserve running" not in page
    assert "default-src 'none'" in headers["content-security-policy"]
    status, info, _ = get(base, "/info")
    assert status == 200 and json.loads(info)["model"]["labels"]
    assert json.loads(info)["server"]["max_payload_size"] == 4 * 2**20  # the limit BodyLimit enforces


def test_a_missing_model_and_a_bad_host_are_one_line_exit_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        nameorigin(["serve", str(tmp_path / "gone.ckpt"), "--port", str(free_port())])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "does not exist" in err
    with pytest.raises(SystemExit) as exit_info:
        nameorigin(["serve", "model.ckpt", "--host", "example.com"])
    assert exit_info.value.code == 2 and "'example.com' is not one of" in capsys.readouterr().err


@pytest.mark.slow
def test_the_serving_floor_benchmark_runs_and_counts_the_servers_cpu(tmp_path):
    """benchmarks/serve_floor.py: LitServe around a model that answers nothing, loaded as serve_load loads ours."""
    import subprocess
    import sys

    from conftest import ROOT

    result = subprocess.run([sys.executable, "-m", "benchmarks.serve_floor"], cwd=ROOT, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    measured = json.loads(result.stdout)
    assert measured["requests"] == 2000 and measured["names_per_s"] > 0 and measured["server_cpu_ms_per_request"] > 0


@pytest.mark.slow
def test_the_published_schema_is_valid_openapi_and_every_answer_fits_it(served):
    """/openapi.json validates as OpenAPI, and real answers of /predict (plain, with sets and explanations, with an
    unusable name), /info and /health validate against the schemas it publishes for them."""
    from jsonschema import Draft202012Validator
    from openapi_spec_validator import validate
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT202012

    base, model = served
    status, text, _ = get(base, "/openapi.json")
    document = json.loads(text)
    validate(document)
    registry = Registry().with_resource("spec", Resource.from_contents(document, default_specification=DRAFT202012))

    def check(path: str, method: str, answer: object, kind: str = "application/json") -> None:
        schema = document["paths"][path][method]["responses"]["200"]["content"][kind]["schema"]
        assert schema, f"{path}: no schema published"
        reference = {"$ref": "spec" + schema["$ref"]} if "$ref" in schema else schema
        Draft202012Validator(reference, registry=registry).validate(answer)

    bodies = [{"names": NAMES}, {"names": NAMES, "top_k": 2, "coverage": 0.9, "max_set_size": 1},
              {"names": NAMES, "prior": "uniform"}]
    if model.suffix == ".ckpt":
        bodies.append({"names": NAMES[:2], "explain": True})
    for body in bodies:
        status, answer = post(base, body)
        assert status == 200
        check("/predict", "post", answer)
    status, text, _ = get(base, "/info")
    check("/info", "get", json.loads(text))
    status, text, _ = get(base, "/health")
    check("/health", "get", text, "text/plain")
    answer_schema = document["components"]["schemas"]["Answer"]["properties"]
    assert {"prediction_set", "explanation", "abstained", "reason_code", "reason"} <= set(answer_schema)
    ranked = document["components"]["schemas"]["RankedLabel"]
    assert ranked["required"] == [Predictor.load(model).label_name, "probability"]
