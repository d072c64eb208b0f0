"""The web dashboard and JSON API: one ASGI app served by uvicorn in the daemon's event loop."""
