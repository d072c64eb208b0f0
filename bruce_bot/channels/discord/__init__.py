"""Discord: the adapter on discord.py (the only package importing it) and its parts — gateway,
messages, sending, live replies, buttons, files, the token probe.

The platform's entry in bruce_bot/platforms.py names its parts; nothing is imported here, so
importing one module of the package never pulls in the rest."""
