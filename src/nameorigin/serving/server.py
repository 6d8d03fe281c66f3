"""The Predictor behind HTTP, on LitServe: `POST /predict` answers names with the fields of the one prediction
schema, under the names `nameorigin predict --format json` uses; `GET /health` is ready once the model has loaded;
`GET /` is the page (serving/page.html); `GET /info` names the model.

LitServe batches requests (max_batch_size, batch_timeout) and runs the model in its own worker process. What it
leaves to the application is done here:
- a request is typed (PredictRequest: unknown fields refused) and checked against the model (stored coverage levels,
  the prior's labels, the names limit) in the HTTP process, before it is queued: a request the worker would refuse
  would fail every request batched with it;
- requests batched together are grouped by their options, so one request's options never reach another's answers;
- the API key, when set, is compared in constant time, on /predict only (/health and the page stay open);
- every refusal is a 4xx with a one-line `detail`.
"""

# No `from __future__ import annotations`: LitServe hands decode_request's parameter annotation to FastAPI, which
# needs the class itself to read the body as a PredictRequest.
import functools
import hashlib
import hmac
import json
import typing
from importlib import metadata, resources
from pathlib import Path
from typing import Any, ClassVar, Literal

import litserve as ls
import torch
from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

from nameorigin.base.digest import file_sha256
from nameorigin.serving.body_limit import BodyLimit
from nameorigin.serving.options import PredictOptions, option_fields
from nameorigin.serving.predict import Predictor
from nameorigin.serving.prior import check_estimable
from nameorigin.serving.responses import InfoResponse, predict_response, published
from nameorigin.serving.schema import as_json
from nameorigin.serving.server_settings import BATCH_TIMEOUT, MAX_BATCH_SIZE, MAX_NAMES, THREADS, ServerSettings

API_KEY_ENV = "NAMEORIGIN_API_KEY"
EXAMPLE = '{"names": ["Nakamura"]}'
API_KEY_HEADER = "x-api-key"
# The page's own script and style are inline; it may fetch from this server and nothing else.
PAGE_POLICY = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; connect-src 'self'"


class RequestChecks:
    """What a request must fit, read off the served model: its options checked against it (PredictOptions), the
    names limit and an estimated prior's minimum of usable names."""

    def __init__(self, predictor: Predictor, max_names: int = MAX_NAMES):
        self.predictor, self.max_names = predictor, max_names

    def check(self, request: "RequestBody") -> None:
        if len(request.names) > self.max_names:
            raise ValueError(f"names: {len(request.names):,} names, and this server takes at most "
                             f"{self.max_names:,} a request: split the list")
        options = request.options().for_model(self.predictor)
        for name in request.names:  # parts for a model of one string, or the wrong number of parts: refused
            self.predictor.as_text(name, options.full_names)
        if options.estimates_prior:
            check_estimable(sum(error is None for error in
                                self.predictor.encode_many(request.names, options.full_names)[2]))


# A request names its prior, or gives label -> share; a file path is the command line's alone (a server reads no
# file a request names).
REQUEST_TYPES = {"prior": Literal["uniform", "estimate"] | dict[str, float] | None}


class RequestBody(BaseModel):
    """What every request is, beside its fields (made from PredictOptions below): strict, no unknown fields, and
    checked against the served model. `checks` is set once per server process, before it forks its HTTP workers:
    a request it refuses is a 422 that never reaches the model's worker."""

    model_config = ConfigDict(extra="forbid", strict=True)
    checks: ClassVar[RequestChecks | None] = None
    names: list[str | list[str]] = Field(min_length=1, description="the names to classify, one per entry: a "
                                         "string, or for a model of parts (GET /info: name_parts) a list of its "
                                         "parts, given first")

    @model_validator(mode="after")
    def fits_the_model(self) -> "RequestBody":
        self.options()  # what the options say on their own, refused as the command refuses them
        if self.checks is not None:
            self.checks.check(self)
        return self

    def options(self) -> PredictOptions:
        return PredictOptions(**{f.name: getattr(self, f.name) for f in option_fields(request_only=True)})

    def batch_key(self, position: int) -> str:
        """Requests with equal keys are answered in one forward pass: equal options and a fixed prior. An
        estimated prior belongs to one request's names alone."""
        settings = {f.name: getattr(self, f.name) for f in option_fields(request_only=True)}
        if self.options().estimates_prior:
            settings["prior"] = f"estimate-{position}"
        return json.dumps(settings, sort_keys=True)


def request_fields() -> dict[str, Any]:
    """PredictOptions' fields a request may set, typed as pydantic reads them, each described by its help."""
    hints = typing.get_type_hints(PredictOptions)
    return {f.name: (REQUEST_TYPES.get(f.name, hints[f.name]), Field(f.default, description=f.metadata["help"]))
            for f in option_fields(request_only=True)}


# The body of POST /predict: names, and PredictOptions' fields under their own names and defaults.
PredictRequest = create_model("PredictRequest", __base__=RequestBody, **request_fields())


class NameAPI(ls.LitAPI):
    """LitServe's side: load the model once in the worker, answer a batch of requests grouped by their options."""

    def __init__(self, model: str, identity: dict[str, Any], threads: int = THREADS,
                 max_batch_size: int = MAX_BATCH_SIZE, batch_timeout: float = BATCH_TIMEOUT):
        super().__init__(max_batch_size=max_batch_size, batch_timeout=batch_timeout, api_path="/predict")
        self.model, self.identity, self.threads = model, identity, threads

    def setup(self, device: str) -> None:
        if self.threads:
            torch.set_num_threads(self.threads)
        self.predictor = Predictor.load(self.model)

    def decode_request(self, request: PredictRequest) -> PredictRequest:
        return request

    def batch(self, inputs: list[PredictRequest]) -> list[PredictRequest]:
        return inputs

    def unbatch(self, output: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return output

    def predict(self, requests: PredictRequest | list[PredictRequest]) -> Any:
        if isinstance(requests, PredictRequest):  # max_batch_size=1: LitServe passes the request itself
            return self.answer([requests])[0]
        return self.answer(requests)

    def answer(self, requests: list[PredictRequest]) -> list[dict[str, Any]]:
        groups: dict[str, list[int]] = {}
        for position, request in enumerate(requests):
            groups.setdefault(request.batch_key(position), []).append(position)
        answers: list[dict[str, Any]] = [{}] * len(requests)
        for members in groups.values():
            options = requests[members[0]].options().for_model(self.predictor)
            names = [name for position in members for name in requests[position].names]
            found = self.predictor.answer(names, options)
            predictions = found.predictions(self.predictor.label_titles, self.predictor.label_name)
            shape = self.predictor.output_options(options)
            start = 0
            for position in members:
                count = len(requests[position].names)
                answers[position] = {"predictions": [as_json(p, shape) for p in predictions[start:start + count]]}
                if options.estimates_prior:
                    answers[position]["estimated_prior"] = dict(zip(
                        self.predictor.labels, (round(share, 6) for share in found.estimated_prior.tolist()),
                        strict=True))
                start += count
        return answers

    def encode_response(self, output: dict[str, Any]) -> Response:
        # Serialized here, in the model's worker: FastAPI would otherwise walk every answer's dicts in the HTTP
        # process (jsonable_encoder), the one process every request passes through.
        return Response(json.dumps({"model": self.identity, **output}, ensure_ascii=False, check_circular=False,
                                   separators=(",", ":")).encode(),
                        media_type="application/json")


class ApiKeyOnPredict:
    """ASGI middleware: with a key set, POST /predict needs the `X-API-Key` header to match it. The two are
    compared as SHA-256 digests with hmac.compare_digest, so the time taken tells neither the key nor its length.
    /health, /info and the page stay open: a load balancer's probe carries no key."""

    def __init__(self, app: Any, key: str, path: str = "/predict"):
        self.app, self.digest, self.path = app, hashlib.sha256(key.encode()).digest(), path

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == self.path:
            given = dict(scope.get("headers") or []).get(API_KEY_HEADER.encode(), b"")
            if not hmac.compare_digest(hashlib.sha256(given).digest(), self.digest):
                response = JSONResponse({"detail": f"missing or wrong API key: send it in the {API_KEY_HEADER} "
                                         "header"}, status_code=401)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def model_identity(path: str | Path, predictor: Predictor) -> dict[str, Any]:
    """What every answer says it came from: the label set, the file's SHA-256 and the package version."""
    digest = file_sha256(path)
    try:
        version = metadata.version("nameorigin")
    except metadata.PackageNotFoundError:
        version = "unknown"
    return {"file": Path(path).name, "sha256": digest, "label_name": predictor.label_name,
            "labels": list(predictor.labels), "label_names": predictor.label_titles, "version": version,
            "name_parts": predictor.part_names}


def one_line(error: RequestValidationError) -> str:
    """pydantic's list of errors as one line: where, then what."""
    parts = []
    for problem in error.errors():
        where = ".".join(str(part) for part in problem.get("loc", ())[1:]) or "body"
        message = str(problem.get("msg", "invalid")).removeprefix("Value error, ")
        if problem.get("type") == "json_invalid":
            where, message = "body", f"not valid JSON: send {EXAMPLE}"
        elif where == "body" and problem.get("type") in ("model_attributes_type", "dict_type", "model_type"):
            message = f"not a JSON object: send {EXAMPLE} with Content-Type: application/json"
        elif problem.get("type") == "extra_forbidden":
            message = f"unknown field: the fields are {', '.join(PredictRequest.model_fields)}"
        parts.append(f"{where}: {message}")
    return "; ".join(parts[:3]) + (f" (and {len(parts) - 3} more)" if len(parts) > 3 else "")


@functools.cache
def page() -> str:
    """The page's HTML, read from the package once per process."""
    return resources.files("nameorigin.serving").joinpath("page.html").read_text(encoding="utf-8")


def build_server(model: str | Path, settings: ServerSettings | None = None) -> ls.LitServer:
    """A LitServer for `model` (a .ckpt, .pt2 or .onnx), not yet running. The model is read here once, so a bad
    path is a UserError before any worker starts; the worker process loads its own copy."""
    settings = settings or ServerSettings()
    predictor = Predictor.load(model)
    PredictRequest.checks = RequestChecks(predictor, settings.max_names)
    identity = model_identity(model, predictor)
    middlewares: list = [(BodyLimit, {"max_bytes": settings.max_body_bytes})]
    middlewares += [(ApiKeyOnPredict, {"key": settings.api_key})] if settings.api_key else []
    card = predictor.model_card or ""
    levels = sorted(float(level) for level in (predictor.calibration.conformal or {}))
    api = NameAPI(str(model), identity, settings.threads, settings.max_batch_size, settings.batch_timeout)
    server = ls.LitServer(api, accelerator="cpu", devices=1, workers_per_device=settings.workers,
                          timeout=settings.timeout, max_payload_size=None, middlewares=middlewares,
                          model_metadata={**identity, "card": card, "coverage_levels": levels})
    server.max_payload_size = settings.max_body_bytes  # what /info states: BodyLimit enforces it, not LitServe
    app = server.app
    app.router.routes = [route for route in app.router.routes if getattr(route, "path", None) != "/"]

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def index() -> HTMLResponse:
        return HTMLResponse(page(), headers={"Content-Security-Policy": PAGE_POLICY})

    @app.exception_handler(RequestValidationError)
    async def refused(request: Request, error: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": one_line(error)}, status_code=422)

    describe_responses(app, predictor.label_name, predictor.part_names)
    return server


def type_parts(document: dict[str, Any], part_names: list[str] | None) -> None:
    """A model of parts: the request's list form names each part in order (JSON Schema's prefixItems); a model of
    one string takes strings alone."""
    names = document["components"]["schemas"]["PredictRequest"]["properties"]["names"]
    if part_names is None:
        names["items"] = {"type": "string"}
        return
    names["items"] = {"anyOf": [
        {"type": "string", "description": "a full name, split into [given, family] by nameparser"
         if part_names == ["given", "family"] else "a name's parts joined by |"},
        {"type": "array", "prefixItems": [{"type": "string", "title": part} for part in part_names],
         "items": False, "minItems": len(part_names), "maxItems": len(part_names)}]}


def describe_responses(app: Any, label_name: str, part_names: list[str] | None = None) -> None:
    """Publish what /predict, /info and /health answer in the app's OpenAPI document (FastAPI's way of extending
    it: the document is built once, then completed). The routes stay LitServe's."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        document = build()
        references, components = published({"post /predict": predict_response(label_name), "get /info": InfoResponse})
        document.setdefault("components", {}).setdefault("schemas", {}).update(components)
        for route, reference in references.items():
            method, path = route.split()
            document["paths"][path][method]["responses"]["200"]["content"] = {
                "application/json": {"schema": reference}}
        type_parts(document, part_names)
        health = document["paths"]["/health"]["get"]["responses"]
        health["200"]["content"] = {"text/plain": {"schema": {"type": "string", "const": "ok"}}}
        health["503"] = {"description": "the model's workers are still loading",
                         "content": {"text/plain": {"schema": {"type": "string", "const": "not ready"}}}}
        return document

    app.openapi = openapi

