"""The analytical brain (docs/design.md, seed 004): background upkeep of a session's metadata.

`library` reads skills and workflows, `responsibilities` says what the brain does for each session
kind (prompt sections and tools, as data), `tools` are its only means of acting, and `runner` runs
it after exchanges. Nothing is imported here, so that the context builder can use the library
without loading the runner.
"""
