"""The terminal as a channel (`bruce chat`): a line typed is a message, a reply is printed
(`channel.py`)."""
