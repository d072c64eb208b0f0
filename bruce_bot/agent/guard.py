"""The anti-hallucination guard: catch a final answer that claims an action no tool performed.

After the loop, the final text is checked for claims of having saved, created, published or
scheduled something, of remembering something for later conversations, and for `/artifacts/`
links. A claim counts as backed only when the matching
tool succeeded in this turn (and a link only when that tool returned it). An unbacked claim is
logged and the model is asked once more to either call the tool or correct its answer.
Detection is deliberately narrow (a past-tense action verb together with a thing that a tool
makes, in English, Portuguese or Spanish) so that ordinary answers are never second-guessed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from bruce_bot.domain import ToolExecution
from bruce_bot.tools.memory import SAVE_TOOL
from bruce_bot.tools.proactive import CREATE_TOOL
from bruce_bot.tools.run_code import RUN_CODE_TOOL

# run_code makes files too (its out/ files are sent as documents).
ARTIFACT_TOOLS = ("artifact_save", RUN_CODE_TOOL)

_SENTENCE = re.compile(r"[^.!?\n]+")
_ARTIFACT_LINK = re.compile(r"\S*/artifacts/[^\s)\]>\"']+")
_CREATED = re.compile(
    r"\b(saved|created|generated|published|uploaded|written|wrote|built|exported|"
    r"salvei|criei|gerei|publiquei|guardei|guard[eé]|cre[eé]|gener[eé]|publiqu[eé])\b",
    re.IGNORECASE,
)
_ARTIFACT_THING = re.compile(
    r"\b(file|html|dashboard|report|page|document|artifact|arquivo|relat[oó]rio|painel|"
    r"p[aá]gina|documento|archivo|informe|panel)s?\b",
    re.IGNORECASE,
)
# "set" alone is also a present tense ("would you like me to set ..."): English needs a subject.
_SCHEDULED = re.compile(
    r"(\bI(?:'ve| have)?\s+(?:just\s+|now\s+|already\s+)?(?:scheduled|set(?: up)?|created|added)\b"
    r"|\b(?:is|has been|was|are|have been)\s+(?:set|scheduled|created)\b"
    r"|\b(?:reminder|task|alarm)s?\s+(?:set|scheduled|created)\b"
    r"|\b(?:agendei|programei|criei|program[eé]|cre[eé]|agend[eé])\b)",
    re.IGNORECASE,
)
_SCHEDULE_THING = re.compile(
    r"\b(reminders?|tasks?|alarms?|briefings?|lembretes?|tarefas?|alarmes?|"
    r"recordatorios?|tareas?)\b",
    re.IGNORECASE,
)
_PROMISE = re.compile(
    r"\b(i'?ll remind you|i will remind you|vou te lembrar|te lembrarei|vou lembrar voc[eê]|"
    r"te recordar[eé])\b",
    re.IGNORECASE,
)

# "I'll remember that": a promise that outlives the conversation, which only memory_save keeps.
_REMEMBERED = re.compile(
    r"(\bI(?:'ll| will| shall)\s+(?:always\s+)?remember\b"
    r"|\bI(?:'ve| have)\s+(?:now\s+)?(?:remembered|memori[sz]ed)\b"
    r"|\b(?:saved|stored|noted|added)\s+(?:that\s+|this\s+|it\s+)?(?:to|in)\s+(?:my\s+)?memory\b"
    r"|\bvou\s+(?:me\s+)?lembrar\s+(?:disso|de\s+que)\b|\b(?:guardei|salvei)\s+na\s+(?:minha\s+)?mem[oó]ria\b"
    r"|\b(?:lo|eso)\s+recordar[eé]\b|\brecordar[eé]\s+que\b|\bguard[eé]\s+en\s+(?:mi\s+)?memoria\b)",
    re.IGNORECASE,
)


# What an answer claims was done: a file saved, something scheduled, something remembered.
ClaimKind = Literal["artifact", "schedule", "memory"]


@dataclass(frozen=True, slots=True)
class UnbackedClaim:
    kind: ClaimKind
    tools: tuple[str, ...]
    evidence: str


def _succeeded(executions: Iterable[ToolExecution], names: Sequence[str]) -> list[str]:
    return [e.result.content for e in executions if e.call.name in names and not e.result.is_error]


def find_unbacked_claim(text: str, executions: Sequence[ToolExecution]) -> UnbackedClaim | None:
    artifact_outputs = _succeeded(executions, ARTIFACT_TOOLS)
    for link in _ARTIFACT_LINK.findall(text):
        path = link[link.index("/artifacts/") :]
        if not any(path in output for output in artifact_outputs):
            return UnbackedClaim("artifact", ARTIFACT_TOOLS, link)
    scheduled = bool(_succeeded(executions, (CREATE_TOOL,)))
    remembered = bool(_succeeded(executions, (SAVE_TOOL,)))
    for sentence in _SENTENCE.findall(text):
        if not artifact_outputs and _CREATED.search(sentence) and _ARTIFACT_THING.search(sentence):
            return UnbackedClaim("artifact", ARTIFACT_TOOLS, sentence.strip())
        if not scheduled and (
            (_SCHEDULED.search(sentence) and _SCHEDULE_THING.search(sentence))
            or _PROMISE.search(sentence)
        ):
            return UnbackedClaim("schedule", (CREATE_TOOL,), sentence.strip())
        if not remembered and _REMEMBERED.search(sentence):
            return UnbackedClaim("memory", (SAVE_TOOL,), sentence.strip())
    return None


def correction_request(claim: UnbackedClaim, available_tools: Iterable[str]) -> str:
    """The message that asks the model, once, to act or to correct itself."""
    tool = claim.tools[0]
    what = {
        "artifact": "a link to a saved file",
        "schedule": "a scheduled reminder or task",
        "memory": "remembering something for later conversations",
    }[claim.kind]
    if tool in set(available_tools):
        action = f"If the user wants it, call '{tool}' now and then answer with its real result."
    else:
        action = f"The '{tool}' tool is not available, so you cannot do this right now."
    return (
        "[Automatic check] Your answer mentions "
        f"{what} (\"{claim.evidence[:200]}\"), but no successful '{tool}' call happened in this "
        f"turn, so it does not exist. {action} Otherwise rewrite your answer without claiming "
        "it, and tell the user plainly what was and was not done. Reply to the user directly; "
        "do not mention this check."
    )
