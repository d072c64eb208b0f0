"""What the Telegram channel itself says: its commands, greeting, help and short notices.

The model's replies are the model's; these are the adapter's own words (a stranger's refusal,
the "only text" notice...), kept apart so that they can be read, and changed, in one place.
"""

from __future__ import annotations

from bruce_bot.channels.policy import (
    NEW_CONVERSATION,
    REMINDERS,
    Command,
    CommandCall,
    PolicyTexts,
)

GREETING = (
    "Hi {name}! I'm Bruce, your personal assistant. Just write to me in plain words: I can "
    "search the web and read pages for you, write reports you can open in a browser, and "
    'remind you of things or send you a briefing at a time you choose ("remind me tomorrow at '
    '9 to call Ana").\n\n'
    "/new starts a fresh conversation · /reminders lists what is scheduled · /help shows this "
    "again."
)
HELP = (
    "Write to me as you would to a person; I remember our conversation until you send /new.\n\n"
    "• Ask questions, or ask me to look something up on the web.\n"
    "• Ask for a report or a summary: I save it and send you the link.\n"
    "• Ask me to remind you, once or every day/week, or to send you a briefing.\n\n"
    "/new: start a new conversation\n/reminders: what is scheduled\n/help: this message\n\n"
    "In a group, mention me (@{username}) or reply to one of my messages."
)
STRANGER_REPLY = (
    "Sorry, I only talk to people my owner has allowed. Your Telegram user id is {user_id}. If "
    "you are the owner, add {user_id} to the Telegram allowlist on the dashboard's Settings page "
    "(it works from the next message), or to channels.telegram.allowed_user_ids in config.yml "
    "and restart me."
)
ANONYMOUS_REPLY = (
    "I can't tell who is writing when a message is sent on behalf of a group or a channel, so "
    'I can\'t answer it. Please write as yourself (admins: turn off "Remain anonymous").'
)
ONLY_TEXT = (
    "I can't read this kind of message (videos, stickers, locations...). I read text, photos, "
    "voice messages and documents (PDF, text, Markdown, CSV, JSON): please send one of those."
)
UNREADABLE = (
    "I couldn't read that message: Telegram sent it in a form I don't understand. Please send "
    "it again, as text if you can."
)
NOT_SAVED = "Sorry, I couldn't save your message just now. Please send it again in a minute."
RESTARTING = "I'm restarting right now. Please send that again in a minute."
# The answers to a button press are the policy's (Telegram shows them as a toast, 200
# characters at most).
TEXTS = PolicyTexts(stranger=STRANGER_REPLY, restarting=RESTARTING)


def _greeting(call: CommandCall) -> str:
    return GREETING.format(name=call.user_name)


def _help(call: CommandCall) -> str:
    return HELP.format(username=call.bot_name)


# In the order of Telegram's command menu.
COMMANDS: tuple[Command, ...] = (
    Command("start", "Say hello and see what Bruce can do", says=_greeting),
    Command("help", "How to talk to Bruce", says=_help),
    NEW_CONVERSATION,
    REMINDERS,
)
