"""An API route as a value: method, path, the models of its parameters, body and answer, and the
coroutine that does the work. The app makes a Starlette route of each (`Endpoint.route`), and
`openapi.py` documents the same values, so the document cannot drift from what is served.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from bruce_bot.web.api.params import parse
from bruce_bot.web.auth import WebAuth
from bruce_bot.web.context import WebContext
from bruce_bot.web.wire import MAX_BODY_BYTES, json_body

P = TypeVar("P", bound=BaseModel)
B = TypeVar("B", bound=BaseModel | None)
_PATH_PARAM = re.compile(r"{(\w+)(?::\w+)?}")
# The config of an answer built from a storage record's attributes (`model_validate(record)`).
FROM_RECORD = ConfigDict(from_attributes=True)


class NoParams(BaseModel):
    """The parameters of a route that takes none."""


@dataclass(frozen=True, slots=True)
class Call(Generic[P, B]):
    """What a route's coroutine is given: the app's parts and the request's validated input."""

    context: WebContext
    auth: WebAuth
    request: Request
    params: P  # the path and query parameters, in one model
    body: B  # None for a route without a body


@dataclass(frozen=True, slots=True)
class Endpoint:
    method: str
    path: str  # Starlette's syntax: "/api/tasks/{task_id}", "/api/settings/{key:path}"
    run: Callable[[Call[Any, Any]], Awaitable[BaseModel]]
    answer: type[BaseModel]
    summary: str
    params: type[BaseModel] = NoParams
    body: type[BaseModel] | None = None
    status: int = 200
    errors: tuple[int, ...] = ()  # the refusals it may answer besides 400/401/413/415
    max_body_bytes: int = MAX_BODY_BYTES  # more for a route that takes files

    @property
    def path_params(self) -> list[str]:
        return _PATH_PARAM.findall(self.path)

    @property
    def openapi_path(self) -> str:
        return _PATH_PARAM.sub(r"{\1}", self.path)

    def route(self, context: WebContext, auth: WebAuth) -> Route:
        example = json.dumps(self.body.model_json_schema()["examples"][0]) if self.body else ""

        async def answer(request: Request) -> Response:
            params = parse(self.params, {**request.query_params, **request.path_params})
            body = None
            if self.body is not None:
                data = await json_body(request, example, self.max_body_bytes)
                body = parse(self.body, data, field="field ")
            result = await self.run(Call(context, auth, request, params, body))
            assert isinstance(result, self.answer), f"{self.path} answered {type(result)}"
            return JSONResponse(result.model_dump(mode="json"), status_code=self.status)

        return Route(self.path, answer, methods=[self.method])
