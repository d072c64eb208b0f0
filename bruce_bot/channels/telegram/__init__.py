"""Telegram: the adapter on python-telegram-bot (the only package importing it) and its parts —
intake, albums, forwards, markup, sending, live replies, buttons, files, the token probe.

The platform's entry in bruce_bot/platforms.py names its parts; nothing is imported here, so
importing one module of the package never pulls in the rest."""
