"""`GET /api/openapi.json`: the API described as OpenAPI 3.1, generated from the endpoints' own
models (parameters, bodies, answers), so it says what the code does. `/api/docs` shows it as a
page (`pages.py`); both sit behind the dashboard's auth like the rest of `/api/`."""

from __future__ import annotations

from functools import cache
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from bruce_bot.web.api.endpoint import Call, Endpoint, NoParams
from bruce_bot.web.paths import DOCS_PATH, OPENAPI_PATH
from bruce_bot.web.wire import ErrorAnswer

REF = "#/components/schemas/{model}"
WRITES = ("POST", "PUT", "PATCH", "DELETE")
REFUSALS = {
    400: "a parameter or the body is not valid: the message names it and what it allows",
    401: "missing or wrong token: send 'Authorization: Bearer <web.auth_token>' or sign in",
    404: "what the request names does not exist (the message says what does)",
    409: "the change conflicts with the current state (reload and try again)",
    413: "the body is larger than the limit",
    415: "a write not sent as 'Content-Type: application/json'",
    503: "the part of Bruce this needs is not running",
}


class OpenApiDocument(BaseModel):
    openapi: str
    info: dict[str, str]
    paths: dict[str, Any]
    components: dict[str, Any]
    security: list[dict[str, list[str]]]


def with_openapi(endpoints: tuple[Endpoint, ...]) -> tuple[Endpoint, ...]:
    """`endpoints` and `GET /api/openapi.json`, the document of them all (itself included)."""

    async def serve(call: Call[NoParams, None]) -> OpenApiDocument:
        return openapi_document(everything)

    own = Endpoint("GET", OPENAPI_PATH, serve, OpenApiDocument, "This document (OpenAPI 3.1)")
    everything = (*endpoints, own)
    return everything


@cache
def openapi_document(endpoints: tuple[Endpoint, ...]) -> OpenApiDocument:
    models: list[tuple[type[BaseModel], JsonSchemaMode]] = [(ErrorAnswer, "serialization")]
    models += [(e.answer, "serialization") for e in endpoints]
    models += [(e.body, "validation") for e in endpoints if e.body is not None]
    refs, schemas = models_json_schema(list(dict.fromkeys(models)), ref_template=REF)
    paths: dict[str, dict[str, Any]] = {DOCS_PATH: {"get": _docs_page()}}
    for endpoint in endpoints:
        operation = _operation(endpoint, refs)
        paths.setdefault(endpoint.openapi_path, {})[endpoint.method.lower()] = operation
    return OpenApiDocument(
        openapi="3.1.0",
        info={"title": "Bruce dashboard API", "version": "1"},
        paths=dict(sorted(paths.items())),
        components={
            "schemas": schemas.get("$defs", {}),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        security=[{"bearer": []}],
    )


def _operation(endpoint: Endpoint, refs: dict[Any, Any]) -> dict[str, Any]:
    answer = refs[(endpoint.answer, "serialization")]
    responses = {
        str(endpoint.status): {"description": endpoint.summary, "content": _json(answer)},
        **_refusals(endpoint, refs[(ErrorAnswer, "serialization")]),
    }
    operation: dict[str, Any] = {
        "operationId": endpoint.run.__name__,
        "summary": endpoint.summary,
        "parameters": _parameters(endpoint),
        "responses": responses,
    }
    if endpoint.body is not None:
        body = refs[(endpoint.body, "validation")]
        operation["requestBody"] = {"required": True, "content": _json(body)}
    return operation


def _parameters(endpoint: Endpoint) -> list[dict[str, Any]]:
    schema = endpoint.params.model_json_schema(ref_template=REF)
    required = set(schema.get("required", ())) | set(endpoint.path_params)
    parameters = []
    for name, field in schema.get("properties", {}).items():
        field = {key: value for key, value in field.items() if key != "title"}
        parameters.append(
            {
                "name": name,
                "in": "path" if name in endpoint.path_params else "query",
                "required": name in required,
                "description": field.pop("description", ""),
                "schema": field,
            }
        )
    return parameters


def _refusals(endpoint: Endpoint, error: dict[str, Any]) -> dict[str, Any]:
    statuses = {401, *endpoint.errors}
    if endpoint.params.model_fields or endpoint.body is not None:
        statuses.add(400)
    if endpoint.body is not None:
        statuses.add(413)
    if endpoint.method in WRITES:
        statuses.add(415)
    return {
        str(status): {"description": REFUSALS[status], "content": _json(error)}
        for status in sorted(statuses)
    }


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def _docs_page() -> dict[str, Any]:
    return {
        "operationId": "docs",
        "summary": "This document as a page, for people",
        "parameters": [],
        "responses": {
            "200": {
                "description": "HTML",
                "content": {"text/html": {"schema": {"type": "string"}}},
            },
            "401": {"description": REFUSALS[401]},
        },
    }
