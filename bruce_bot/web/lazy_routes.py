"""Routes under a path prefix, made on the first request that reaches the prefix.

The JSON API's modules (a pydantic model per parameter set, body and answer, and the OpenAPI
document built from them) take about 45 ms and 2 MB to import, and nothing needs them before
someone opens the dashboard. `LazyRoutes` stands in the app's route list where those routes
would be, and matches exactly as they would, in their order: a full match wins, a partial one
(a known path, another method: 405) is kept for when nothing matches fully.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from starlette.datastructures import URLPath
from starlette.routing import BaseRoute, Match, NoMatchFound
from starlette.types import Receive, Scope, Send

_MATCHED = "bruce.lazy_route"  # the scope key naming the route that matched, for `handle`


class LazyRoutes(BaseRoute):
    def __init__(self, prefix: str, make: Callable[[], Sequence[BaseRoute]]) -> None:
        self.prefix = prefix
        self._make = make
        self._routes: Sequence[BaseRoute] | None = None

    @property
    def routes(self) -> Sequence[BaseRoute]:
        if self._routes is None:
            self._routes = self._make()
        return self._routes

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if scope["type"] != "http" or not scope["path"].startswith(self.prefix):
            return Match.NONE, {}
        partial: tuple[Match, Scope] | None = None
        for route in self.routes:
            match, child_scope = route.matches(scope)
            if match is Match.FULL:
                return match, {**child_scope, _MATCHED: route}
            if match is Match.PARTIAL and partial is None:
                partial = match, {**child_scope, _MATCHED: route}
        return partial or (Match.NONE, {})

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        route: BaseRoute = scope[_MATCHED]
        scope["route"] = route
        await route.handle(scope, receive, send)

    def url_path_for(self, name: str, /, **path_params: Any) -> URLPath:
        for route in self.routes:
            try:
                return route.url_path_for(name, **path_params)
            except NoMatchFound:
                pass
        raise NoMatchFound(name, path_params)
