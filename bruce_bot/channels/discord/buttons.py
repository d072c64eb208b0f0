"""Buttons under Bruce's Discord messages, and the answers to a press on one of them.

A message's `Choice`s become one action row of buttons (custom_id = the choice's data, the
first one primary), sent with a `discord.ui.View` that is stopped at once: presses are handled
in `on_interaction`, for any message Bruce ever sent, so they keep working after a restart. What
a press gets is the channel policy's decision (policy.py: `Presses`); here it becomes Discord's
answers: an ephemeral message only the presser sees, or the message updated without its
buttons (interaction response type 7).
"""

from __future__ import annotations

import contextlib

import aiohttp
import discord
import structlog

from bruce_bot.domain import Choice

log = structlog.get_logger(__name__)

CUSTOM_ID_LIMIT = 100  # characters, Discord's limit for a button's custom_id
BUTTON_LABEL_LIMIT = 80
BUTTONS_PER_ROW = 5
SEND_ERRORS = (discord.DiscordException, aiohttp.ClientError, OSError)


def choice_view(choices: tuple[Choice, ...]) -> discord.ui.View | None:
    """The choices as one row of buttons (the first one primary), or None without any."""
    view = discord.ui.View(timeout=None)
    for choice in choices:
        label = choice.label.strip()[:BUTTON_LABEL_LIMIT]
        if not label or not 1 <= len(choice.data) <= CUSTOM_ID_LIMIT:
            log.warning("discord_button_left_out", label=choice.label, data_chars=len(choice.data))
            continue
        if len(view.children) == BUTTONS_PER_ROW:
            log.warning("discord_button_left_out", label=choice.label, reason="row full")
            continue
        style = discord.ButtonStyle.secondary if view.children else discord.ButtonStyle.primary
        view.add_item(discord.ui.Button(label=label, custom_id=choice.data, style=style, row=0))
    return view if view.children else None


async def answer_privately(interaction: discord.Interaction, text: str) -> None:
    """An ephemeral answer to a press: only the presser sees it."""
    try:
        await interaction.response.send_message(text, ephemeral=True)
    except SEND_ERRORS as exc:
        log.info("discord_press_not_answered", interaction_id=interaction.id, error=repr(exc))


async def take_buttons_off(interaction: discord.Interaction, message: discord.Message) -> None:
    """Answer the press by updating its message without the buttons."""
    try:
        await interaction.response.edit_message(view=None)
    except SEND_ERRORS as exc:
        # Too late (Discord waits 3 s for an answer) or refused: edit the message instead.
        log.info("discord_press_not_answered", interaction_id=interaction.id, error=repr(exc))
        with contextlib.suppress(*SEND_ERRORS):
            await message.edit(view=None)
