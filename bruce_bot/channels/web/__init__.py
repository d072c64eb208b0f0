"""The dashboard's web chat as a channel: messages posted to /api/chat and the replies read back
(`channel.py`); the dashboard itself is bruce_bot/web/."""
