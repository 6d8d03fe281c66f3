"""The server's answers as pydantic models, for its published OpenAPI schema: /predict's answer (built from the one
prediction schema, nameorigin.serving.schema, under the served model's label key), /info's and /health's. The
models only describe: the answers are still serialized in the model's workers, never validated on the way out,
so publishing them costs the server nothing per request."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model

from nameorigin.serving.schema import FIELDS


class ModelIdentity(BaseModel):
    """What every answer says it came from."""

    file: str = Field(description="the served model's file name")
    sha256: str = Field(description="the file's SHA-256")
    label_name: str = Field(description="what a label is (language, country, gender): the key of each ranked label")
    labels: list[str]
    label_names: dict[str, str] | None = Field(None, description="a country model's ISO code -> country name")
    version: str = Field(description="the nameorigin package version")
    name_parts: list[str] | None = Field(None, description="a model of parts: the parts a name is given as, in "
                                         "order (null: one string)")


class ModelInfo(ModelIdentity):
    card: str = Field(description="the model card, Markdown")
    coverage_levels: list[float] = Field(description="the coverage levels a request may ask sets for")


class ServerInfo(BaseModel):
    model_config = ConfigDict(extra="allow")  # LitServe's own settings, which it may add to

    devices: list[Any]
    workers_per_device: int
    timeout: float | bool
    max_payload_size: int


class InfoResponse(BaseModel):
    model: ModelInfo
    server: ServerInfo


def predict_response(label_name: str) -> type[BaseModel]:
    """/predict's answer for a model whose labels are keyed `label_name`: every field the prediction schema can
    add, optional (present when asked for and known)."""
    ranked = create_model("RankedLabel", **{label_name: (str, ...), "probability": (float, ...),
                                           "label_name": (str | None, None)})
    fields = {key: (kind | None, None) for field in FIELDS for key, kind in field.json_fields().items()}
    answer = create_model("Answer", name=(str, ...), predictions=(list[ranked], ...), **fields)
    return create_model("PredictResponse", model=(ModelIdentity, ...), predictions=(list[answer], ...),
                        estimated_prior=(dict[str, float] | None, None))


def published(models: dict[str, type[BaseModel]]) -> tuple[dict[str, Any], dict[str, dict]]:
    """Each model's reference and every schema they need, for an OpenAPI document's components."""
    components: dict[str, dict] = {}
    references = {}
    for path, model in models.items():
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        components.update(schema.pop("$defs", {}))
        components[model.__name__] = schema
        references[path] = {"$ref": f"#/components/schemas/{model.__name__}"}
    return references, components
