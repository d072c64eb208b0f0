"""What the Slack channel itself says: its commands, help, set-up fixes and short notices.

Slack's clients take a message that starts with `/` as a slash command of some app, so the
commands are written `!new`, `!reminders`, `!help` here (`/new` works where Slack lets it
through). The answers to a button press are the policy's.
"""

from __future__ import annotations

from bruce_bot.channels.policy import (
    NEW_CONVERSATION,
    REMINDERS,
    Command,
    CommandCall,
    PolicyTexts,
)

BOT_TOKEN_FIX = (
    "channels.slack.bot_token was refused by Slack; copy the Bot User OAuth Token (xoxb-...) "
    "again from your Slack app's OAuth & Permissions page (reinstall the app if it changed), "
    "then restart Bruce (or save it in the dashboard's Settings)"
)
APP_TOKEN_FIX = (
    "channels.slack.app_token was refused by Slack; make an app-level token with the "
    "connections:write scope (Basic Information → App-Level Tokens), turn on Socket Mode, "
    "put the token (xapp-...) in config.yml and restart Bruce"
)
HELP_TEXT = (
    "I'm Bruce, your personal assistant. Write to me here and I'll answer; I can search the web, "
    "read pages, write reports and keep reminders.\n"
    "!new — start a new conversation (I set the earlier messages aside)\n"
    "!reminders — list the scheduled reminders and briefings of this conversation\n"
    "!help — this message"
)
CHANNEL_HELP_TEXT = (
    HELP_TEXT + "\nIn a channel, mention me: I answer in a thread, and in that thread you "
    "don't need to mention me again. Each thread is its own conversation."
)
STRANGER_REPLY = (
    "Hi! I'm a private assistant and only talk to people my owner has allowed. Your Slack "
    "member id is {user_id}; if you know my owner, ask them to add it to the Slack allowlist "
    "on my dashboard's Settings page (or channels.slack.allowed_user_ids in config.yml)."
)
EMPTY_MENTION_REPLY = "Yes? Write your message after the mention and I'll answer."
NOT_STORED_REPLY = "I couldn't take your message just now; please send it again in a minute."
ONLY_TEXT_REPLY = (
    "I can't read this kind of message. I read text, pictures, voice messages and files "
    "(PDF, text, Markdown, CSV, JSON): please send one of those."
)

TEXTS = PolicyTexts(stranger=STRANGER_REPLY)


def _help(call: CommandCall) -> str:
    return CHANNEL_HELP_TEXT if call.in_group else HELP_TEXT


COMMANDS: tuple[Command, ...] = (
    NEW_CONVERSATION,
    REMINDERS,
    Command("help", "How to talk to Bruce", says=_help),
)
