"""LLM providers behind one protocol (see `base.py`); `create_llm` picks one from the config."""
