"""Messaging: the way a message travels through the core between the channels and the turn.

`inbox.py` is the durable per-session queue and its workers (a message is stored before a
channel acknowledges it, then handed to its session's next turn); `outbox.py` stores each reply
first, then splits and delivers it through its channel with retries and redelivery. Channels
never import this package: an adapter sees only its `InboxPort` (channels/base.py), which
`inbox_port.py` (`Gateway`) implements over the inbox and the stores.
"""
