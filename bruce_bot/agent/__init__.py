"""The agent core: the loop (LLM ⇄ tools), prompt layers, summaries and the turn pipeline."""
