"""Paths that several parts of the web app name: where the JSON API lives, its OpenAPI document
and its docs page. Here, not in `api/`, so that naming them does not import the API."""

from __future__ import annotations

API_PREFIX = "/api/"
OPENAPI_PATH = "/api/openapi.json"
DOCS_PATH = "/api/docs"
