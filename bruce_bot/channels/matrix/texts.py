"""What the Matrix channel itself says: its commands, help, set-up fixes and short notices.

The model's replies are the model's; these are the adapter's own words, kept in one place.
"""

from __future__ import annotations

from bruce_bot.channels.policy import (
    NEW_CONVERSATION,
    REMINDERS,
    Command,
    CommandCall,
    PolicyTexts,
)

LOGIN_FIX = (
    "the homeserver refused channels.matrix's login: check channels.matrix.user_id and "
    "channels.matrix.password (or channels.matrix.access_token) in config.yml, then restart Bruce"
)
HELP_TEXT = (
    "I'm Bruce, your personal assistant. Write to me here and I'll answer; I can search the web, "
    "read pages, write reports and keep reminders.\n"
    "/new — start a new conversation (I set the earlier messages aside)\n"
    "/reminders — list the scheduled reminders and briefings of this room\n"
    "/help — this message\n"
    "(!new, !reminders and !help work too.)"
)
ROOM_HELP_TEXT = HELP_TEXT + "\nIn a room with others, mention me or reply to one of my messages."
STRANGER_REPLY = (
    "Hi! I'm a private assistant and only talk to people my owner has allowed. Your Matrix id is "
    "{user_id}; if you know my owner, ask them to add it to channels.matrix.allowed_user_ids."
)
# Said once per encrypted room: without libolm Bruce can neither read nor write there.
ENCRYPTED_REFUSAL = (
    "This room is end-to-end encrypted, and I can't read encrypted messages: my Matrix account "
    "runs without encryption support (olm is not installed). Please talk to me in an "
    "unencrypted room or direct chat (turn encryption off when you create it)."
)
ONLY_TEXT_REPLY = "I can only read text messages on Matrix for now: please write to me in words."
EMPTY_MENTION_REPLY = "Yes? Write your message after the mention and I'll answer."
NOT_STORED_REPLY = "I couldn't take your message just now; please send it again in a minute."

TEXTS = PolicyTexts(stranger=STRANGER_REPLY)


def _help(call: CommandCall) -> str:
    return ROOM_HELP_TEXT if call.in_group else HELP_TEXT


COMMANDS: tuple[Command, ...] = (
    NEW_CONVERSATION,
    REMINDERS,
    Command("help", "How to talk to Bruce", says=_help),
)
