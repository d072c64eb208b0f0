"""The Matrix channel (matrix-nio, without end-to-end encryption): see channel.py."""
