"""Persistence: SQLAlchemy models, the database handle and one small store per concern."""
