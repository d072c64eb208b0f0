"""Bruce: a self-hosted personal AI assistant."""
