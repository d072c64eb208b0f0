"""Running code the model wrote, in a bubblewrap sandbox (issue 24).

`bwrap.py` builds the bubblewrap command line (new namespaces, the system read-only, the
session's workspace read-write at /workspace, an empty environment), `limits.py` the resource
limits set before it starts, `runner.py` runs it (output capped while it is read, wall time with
the whole sandbox killed, the workspace's size watched), `workspace.py` the workspace on disk
(files in and out, never following a link out of it), `network.py` the optional network
(slirp4netns, the host's loopback unreachable) and `probe.py` whether bubblewrap works here at
all. Nothing here imports a platform SDK or the agent.
"""
