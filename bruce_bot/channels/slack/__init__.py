"""Bruce's Slack channel: the only package that imports slack_sdk."""
