"""Bruce as an MCP client: the tools of the Model Context Protocol servers named in `mcp.servers`.

`manager.py` starts every enabled server in the background (never delaying readiness), keeps each
one's state and tools, restarts a server that dies with a capped backoff, and is the tool
registry's source of `<server>__<tool>` tools (`tools.py`). `connection.py` is the only module that
imports the official `mcp` SDK, and it is imported only once a server is configured.
"""
