"""Channel adapters: each platform behind the `ChannelAdapter` protocol of `base.py`."""
