"""What the Discord channel itself says: its commands, help, set-up fixes and short notices.

The model's replies are the model's; these are the adapter's own words (a stranger's refusal,
the "only text" notice, what to fix when Discord refuses the bot...), kept apart so that they
can be read, and changed, in one place. The answers to a button press are the policy's.
"""

from __future__ import annotations

from bruce_bot.channels.policy import (
    NEW_CONVERSATION,
    REMINDERS,
    Command,
    CommandCall,
    PolicyTexts,
)

INTENT_FIX = (
    "enable MESSAGE CONTENT INTENT in the Discord developer portal → your app → Bot → "
    "Privileged Gateway Intents, then restart Bruce"
)
TOKEN_FIX = (
    "channels.discord.token was refused by Discord; copy the bot token again from the Discord "
    "developer portal → your app → Bot → Reset Token, put it in config.yml (or "
    "$DISCORD_BOT_TOKEN), then restart Bruce"
)
HELP_TEXT = (
    "I'm Bruce, your personal assistant. Write to me here and I'll answer; I can search the web, "
    "read pages, write reports and keep reminders.\n"
    "/new — start a new conversation (I set the earlier messages aside)\n"
    "/reminders — list the scheduled reminders and briefings of this chat\n"
    "/help — this message\n"
    "(!new, !reminders and !help work too.)"
)
# In a server Bruce only sees what is addressed to it: say how (never in a DM).
SERVER_HELP_TEXT = HELP_TEXT + "\nIn a server, mention me or reply to one of my messages."
STRANGER_REPLY = (
    "Hi! I'm a private assistant and only talk to people my owner has allowed. Your Discord "
    "user id is {user_id}; if you know my owner, ask them to add it to the Discord allowlist "
    "on my dashboard's Settings page (or channels.discord.allowed_user_ids in config.yml)."
)
ONLY_TEXT_REPLY = (
    "I can't read this kind of message (stickers, polls...). I read text, pictures, voice "
    "messages and files (PDF, text, Markdown, CSV, JSON): please send one of those."
)
EMPTY_MENTION_REPLY = "Yes? Write your message after the mention and I'll answer."
NOT_STORED_REPLY = "I couldn't take your message just now; please send it again in a minute."

TEXTS = PolicyTexts(stranger=STRANGER_REPLY)


def _help(call: CommandCall) -> str:
    return SERVER_HELP_TEXT if call.in_group else HELP_TEXT


COMMANDS: tuple[Command, ...] = (
    NEW_CONVERSATION,
    REMINDERS,
    Command("help", "How to talk to Bruce", says=_help),
)
