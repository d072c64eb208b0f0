"""Brain cost benchmark: what the analytical brain costs over one scripted 50-exchange conversation.

`bruce run` runs as a subprocess on its default config (brain on, SQLite in a fresh data dir,
Telegram enabled: bench/soak.py's `Daemon`), with the real python-telegram-bot long-polling the
fake Bot API and the real anthropic SDK calling the fake Messages API over HTTP; both fakes run
here. One user talks with Bruce through Telegram: 50 messages over five topics (a trip, index
funds, sourdough, an asyncio bug, marathon training) with small talk in between, each sent after
the previous reply arrived and `--pause` seconds of "reading" (longer than the brain's
coalescing window, so that coalescing does not flatter the figures: bursts are not what this
measures).

The fake model tells the callers apart by the tools a request offers (bench/e2e.py's
`Model.kind`: the brain's offer `everything_is_ready`, the agent's the chat tools, the summaries
none). The agent answers each message with the gist of an answer to it and a line of general
advice on its topic (a different one each time). The brain behaves like a diligent model would:
in one response it renames the session when the title does not fit the topic of the newest
message (and switches the topic's skill on), together with `everything_is_ready`; otherwise it
calls `everything_is_ready` alone. Token counts are the ones the fake reports in each response's
`usage` (4 characters a token; prompt tokens = input + cache read + cache write, so prompt
caching does not change the share).

Reported: brain LLM calls per exchange (goal ≤ 0.25), brain prompt tokens as a share of the
agent's (goal ≤ 15 %), why the brain ran (from the daemon's log), the title and skills the
session ended with, and the size of each run's briefing.

    make bench-brain
    .venv/bin/python bench/brain_cost.py --json bench/out/brain.json [--brain every_exchanges=8 ...]
    PYTHONPATH=/path/to/other/tree .venv/bin/python bench/brain_cost.py   # that tree's daemon

Every wait has a deadline; the daemon is stopped (SIGTERM, then SIGKILL) whatever happens.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
import sqlite3
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from e2e import Model  # noqa: E402  (bench/e2e.py; via bench/run.py the root is on sys.path)
from soak import FIRST_USER_ID, Daemon  # noqa: E402

from tests.fakes.anthropic_server import AnthropicReply, FakeAnthropicServer  # noqa: E402
from tests.fakes.scripted_server import HTTPAnswer  # noqa: E402
from tests.fakes.telegram_server import FakeTelegramServer, FakeUser  # noqa: E402

CALLS_GOAL = 0.25
SHARE_GOAL = 0.15


@dataclass(frozen=True, slots=True)
class Topic:
    title: str  # what a good brain names the session
    skill: str | None  # the built-in skill that fits it
    general: tuple[str, ...]  # advice the agent adds to its answers on the topic, in turn
    exchanges: tuple[tuple[str, str], ...]  # (the user's message, the gist of the answer)


TOPICS = (
    Topic(
        "🧳 Lisbon weekend",
        "planning",
        (
            "Lisbon in May is lovely: warm days, cool evenings and fewer crowds than in summer.",
            "The metro and the trams cover the centre; walking is often the fastest way around.",
            "Book the popular places a few days ahead, especially for a Saturday evening.",
        ),
        (
            (
                "I'm planning a long weekend in Lisbon in May with my partner. Where should we "
                "start?",
                "Start with the dates and a base: three nights are enough for the old town, the "
                "river front and one day trip. Decide on a budget for the hotel first.",
            ),
            (
                "Which neighbourhoods are nicest to stay in for a first visit?",
                "Chiado and Baixa are central and flat, Príncipe Real is quiet and leafy, Alfama "
                "is the most charming but steep, with cobbled lanes.",
            ),
            (
                "Is Alfama too hilly if we have heavy suitcases?",
                "It can be: the lanes are steep and many buildings have no lift. Take a taxi to "
                "the door, or pick a hotel near a tram stop lower down.",
            ),
            (
                "How do we get from the airport to Baixa?",
                "The red metro line takes about twenty minutes with one change at Alameda; a taxi "
                "or ride-hailing car costs around fifteen euros.",
            ),
            (
                "What day trips would you recommend, Sintra or Cascais?",
                "Sintra for palaces and forest, Cascais for the sea: the first deserves a full "
                "day with an early train, the second is an easy afternoon along the coast.",
            ),
            (
                "Can you suggest a few restaurants for grilled sardines and fado?",
                "Sardines are best at the small grills of Alfama and Mouraria in June's festival "
                "season, but in May many tascas serve them; for fado, book a table at a small "
                "house in Alfama rather than a show restaurant.",
            ),
            ("ok thanks", "You're welcome! Tell me when you want an itinerary for the three days."),
            (
                "What's the weather usually like in Lisbon in late May?",
                "Usually sunny, 20 to 26 degrees by day and cooler by the river at night; bring "
                "a light jacket and good walking shoes for the hills.",
            ),
            (
                "Do we need to book the Belém tower tickets in advance?",
                "Yes, in spring it is wise: buy timed tickets online for the tower and the "
                "Jerónimos monastery, and go early to avoid the queues.",
            ),
            (
                "Great, let's go with three nights in Príncipe Real.",
                "Good choice: it is close to Chiado and the viewpoints, quiet at night, and a "
                "short walk downhill to Baixa and the river.",
            ),
        ),
    ),
    Topic(
        "📈 Index funds",
        "research",
        (
            "Keep it simple: a broad, low-cost index fund owns the whole market for you.",
            "Low fees and regular saving matter more than picking the perfect fund.",
            "Invest only money you will not need for at least five to ten years.",
        ),
        (
            (
                "Different question: I want to start investing in index funds. How do I begin?",
                "Open an account at a low-cost broker, pick one broad world index fund, and set "
                "up a monthly savings plan; keep an emergency fund in cash first.",
            ),
            (
                "What's the difference between an ETF and a mutual fund?",
                "An ETF trades on the exchange during the day like a share; a mutual fund is "
                "bought from the fund company at one price a day. Both can track an index.",
            ),
            (
                "Should I choose accumulating or distributing share classes?",
                "Accumulating classes reinvest the dividends inside the fund, distributing ones "
                "pay them out; for long-term saving accumulating is usually simpler.",
            ),
            (
                "How much of my salary should go into it each month?",
                "A common rule is 10 to 20 percent of your net income once the emergency fund is "
                "in place; an amount you can keep up in bad months beats a big one you stop.",
            ),
            (
                "Is a global all-world fund enough or do I need bonds too?",
                "An all-world equity fund is diversified across countries; bonds lower the swings "
                "of the portfolio, so add some if you need the money within ten years.",
            ),
            (
                "What about fees, what TER is reasonable?",
                "For a world equity index ETF a total expense ratio of 0.1 to 0.25 percent is "
                "reasonable; also check the broker's order and custody fees.",
            ),
            ("makes sense", "Glad it helps. Shall I compare two or three concrete funds next?"),
            (
                "Which brokers are cheap for monthly savings plans in Europe?",
                "Several online brokers offer free or one-euro ETF savings plans; compare the "
                "plan fee, the choice of ETFs and whether the broker is regulated in your country.",
            ),
            (
                "How are ETF gains taxed if I sell after ten years?",
                "That depends on your country of residence: many tax capital gains when you sell, "
                "some also tax accumulated dividends each year. Tell me where you live.",
            ),
        ),
    ),
    Topic(
        "🍞 Sourdough baking",
        None,
        (
            "Sourdough rewards patience: time and temperature matter more than recipes.",
            "Keep notes of flour, water, times and room temperature for each bake.",
            "A kitchen scale makes every step of the bread far more repeatable.",
        ),
        (
            (
                "Now something fun: my sourdough starter smells like nail polish remover. Is it "
                "dead?",
                "Not dead, just hungry: an acetone smell means the starter ran out of food. Feed "
                "it more often for a few days and it will smell sour and yeasty again.",
            ),
            (
                "How often should I feed it and with which flour?",
                "Once or twice a day at room temperature, with equal weights of flour and water; "
                "a little whole wheat or rye flour in the feed makes it more active.",
            ),
            (
                "My loaves come out flat and dense. What am I doing wrong?",
                "Usually the dough is under-fermented or the shaping is too loose: let the bulk "
                "rise longer, until the dough is airy, and build more tension when shaping.",
            ),
            (
                "What hydration do you recommend for a beginner loaf?",
                "Around 70 percent water to flour: the dough is easy to handle and still gives an "
                "open crumb. Go wetter once shaping feels easy.",
            ),
            (
                "Should I do the bulk fermentation in the fridge overnight?",
                "Better to finish the bulk at room temperature and retard the shaped loaf in the "
                "fridge overnight: more flavour, and the cold dough is easier to score.",
            ),
            ("thanks!", "Any time, happy baking! Tell me how the next loaf turns out."),
            (
                "How do I get a crispier crust in a home oven?",
                "Bake in a preheated Dutch oven with the lid on for twenty minutes to trap the "
                "steam, then without the lid until the crust is deep brown.",
            ),
            (
                "Can I add whole wheat or rye to the dough?",
                "Yes, start with 10 to 20 percent of the flour and add a little more water, since "
                "whole grains absorb more; the dough will ferment faster.",
            ),
            (
                "What's a good schedule for baking on a Saturday morning?",
                "Feed the starter Friday morning, mix in the afternoon, shape in the evening, "
                "leave the loaf in the fridge overnight and bake straight from it on Saturday.",
            ),
            (
                "How do I know the dough is ready to shape?",
                "It has grown by about half, feels airy and wobbly, shows bubbles on the sides "
                "and domes slightly at the edges of the container.",
            ),
            (
                "How long does the bread keep, and can I freeze it?",
                "Three or four days in a cloth bag, cut side down; sliced and frozen it keeps for "
                "months and toasts well straight from the freezer.",
            ),
        ),
    ),
    Topic(
        "🐍 Asyncio hang",
        "research",
        (
            "Make the problem visible first: logs with timings around every external call.",
            "Timeouts belong at the boundaries, where you can also tell the caller what failed.",
            "A small reproduction makes the fix much easier to trust.",
        ),
        (
            (
                "Work question: my Python asyncio service hangs when the database is slow. How "
                "do I debug it?",
                "Enable asyncio debug mode and dump all tasks with their stacks when it hangs; "
                "check whether the handlers wait on the database without a timeout or whether "
                "something blocks the event loop.",
            ),
            (
                "How do I find which task is blocking the event loop?",
                "Debug mode logs callbacks that take longer than 100 ms; a sampling profiler "
                "like py-spy shows the blocking call in the stack of the loop's thread.",
            ),
            (
                "Would asyncio.wait_for around every query be a bad idea?",
                "It adds noise and hides the cause; put one timeout per request at the handler "
                "and configure the driver's own statement timeout instead.",
            ),
            (
                "Should I use a connection pool, and how big?",
                "Yes: size it to what the database server handles well, often 10 to 20 "
                "connections per process, and let requests queue for a connection with a timeout.",
            ),
            (
                "The logs show 'Task was destroyed but it is pending'. What does that mean?",
                "A task was garbage-collected or the loop closed while it still ran: keep a "
                "reference to every background task and cancel and await them on shutdown.",
            ),
            ("got it", "Great. Tell me what the task dump shows and we can narrow it down."),
            (
                "How can I reproduce the slow database in a test?",
                "Put a proxy such as toxiproxy between the service and the database and add "
                "latency, or run the query through pg_sleep in a test fixture.",
            ),
            (
                "Is it worth moving the CPU-heavy parsing to a thread?",
                "If a parse takes more than a few milliseconds, yes: asyncio.to_thread keeps the "
                "loop responsive; for heavy work a process pool avoids the GIL.",
            ),
            (
                "What's the cleanest way to shut the service down on SIGTERM?",
                "Install a signal handler that stops accepting requests, waits for in-flight "
                "ones with a deadline, cancels the remaining tasks and closes the pool.",
            ),
        ),
    ),
    Topic(
        "🏃 Marathon training",
        "planning",
        (
            "Consistency beats intensity: most runs should feel easy.",
            "Sleep and food are part of the training plan, not extras.",
            "Increase the weekly distance by no more than about ten percent.",
        ),
        (
            (
                "Last topic for today: I signed up for my first marathon in October. Can you help "
                "me train?",
                "Gladly: we will build a plan from your current weekly distance up to a long run "
                "of about 32 km, with a taper before race day.",
            ),
            (
                "I can run 10 km comfortably now. Is five months enough?",
                "Yes, five months from a comfortable 10 km is a realistic first marathon "
                "build-up if you stay healthy and run regularly.",
            ),
            (
                "How many days a week should I run?",
                "Four days suit most first-timers: two easy runs, one workout with some faster "
                "kilometres and one long run at the weekend.",
            ),
            (
                "What pace should my long runs be?",
                "Slow and conversational, about a minute per kilometre slower than your goal "
                "marathon pace; the point is time on your feet.",
            ),
            (
                "Do I need gels or is water enough on long runs?",
                "Beyond about 90 minutes take carbohydrates: a gel or chews every 30 to 45 "
                "minutes with water, and practise it in training.",
            ),
            ("ok", "Shall I put the first four weeks of the plan together?"),
            (
                "My knee hurts after 15 km. Should I stop?",
                "If the pain changes how you run, stop and rest a few days; if it persists, see a "
                "physiotherapist before the long runs grow.",
            ),
            (
                "Which shoes are good for high mileage?",
                "Cushioned daily trainers that feel comfortable from the first run; try several "
                "in a running shop and rotate two pairs.",
            ),
            (
                "How should I taper in the last three weeks?",
                "Cut the weekly distance to about 80, 60 and 40 percent, keep a few short faster "
                "sections, and sleep well.",
            ),
            (
                "What should I eat the night before the race?",
                "A familiar meal rich in carbohydrates such as pasta or rice, not too much fibre "
                "or fat, and plenty of water.",
            ),
            (
                "Thanks for all the help, Bruce!",
                "You're welcome, and good luck in October! Tell me how the first long run goes.",
            ),
        ),
    ),
)
# (the user's message, the agent's answer, its topic)
SCRIPT: list[tuple[str, str, Topic]] = [
    (text, gist, topic) for topic in TOPICS for text, gist in topic.exchanges
]
assert len(SCRIPT) == 50
BY_TEXT = {" ".join(text.split()): (gist, topic) for text, gist, topic in SCRIPT}
USER_LINE = re.compile(r"^User: (.*)$", re.MULTILINE)
BRAIN_STARTED = re.compile(r"brain_started .*\breason=(\S+)")  # the daemon's log, when it says
TITLE_LINE = re.compile(r"^Title: (.*)$", re.MULTILINE)
SKILLS_LINE = re.compile(r"^Active skills: (.*)$", re.MULTILINE)


def _texts(message: dict[str, Any]) -> list[str]:
    content = message.get("content")
    if isinstance(content, str):
        return [content]
    return [
        b.get("text", "") for b in content or [] if isinstance(b, dict) and b.get("type") == "text"
    ]


class ConversationModel(Model):
    """e2e's counting model, answering this conversation as the agent, the brain and the
    summarizer would."""

    def __init__(self) -> None:
        super().__init__()
        self.answered = 0
        self.unknown = 0  # agent requests not answering a scripted message (should stay 0)
        self.renames: list[str] = []
        self.brain_briefing_chars: list[int] = []

    def __call__(self, body: dict[str, Any]) -> str | AnthropicReply:
        kind = self.kind(body)
        self.counts[kind] += 1
        self.last_request = time.monotonic()
        messages = body.get("messages") or []
        if kind == "brain":
            return self.brain(messages)
        if kind == "other":
            return "The user and Bruce talked about travel, investing, baking, code and running."
        newest = next((m for m in reversed(messages) if m.get("role") == "user"), None)
        # The newest user turn may carry more blocks than the message (per-turn context).
        for text in reversed(_texts(newest or {})):
            known = BY_TEXT.get(" ".join(text.split()))
            if known is not None:
                gist, topic = known
                self.answered += 1
                general = topic.general[self.answered % len(topic.general)]
                return f"{gist} {general}"
        self.unknown += 1
        return "Happy to help with that."

    def brain(self, messages: list[dict[str, Any]]) -> AnthropicReply:
        ready = ("everything_is_ready", {})
        if len(messages) != 1:  # a later round of a run: nothing more to do
            return AnthropicReply(tool_calls=[ready])
        briefing = "\n".join(_texts(messages[0]))
        self.brain_briefing_chars.append(len(briefing))
        users = USER_LINE.findall(briefing)
        known = BY_TEXT.get(" ".join(users[-1].split())) if users else None
        topic = known[1] if known else None
        title = TITLE_LINE.search(briefing)
        skills = SKILLS_LINE.search(briefing)
        active = [] if skills is None else [s.strip() for s in skills.group(1).split(",")]
        calls: list[Any] = []
        if topic is not None and (title is None or title.group(1).strip() != topic.title):
            calls.append(("rename_session", {"title": topic.title}))
            self.renames.append(topic.title)
            calls += [
                ("deactivate_skill", {"name": s}) for s in active if s not in ("none", topic.skill)
            ]
            if topic.skill and topic.skill not in active:
                calls.append(("activate_skill", {"name": topic.skill}))
        return AnthropicReply(tool_calls=[*calls, ready])


class MeteredAnthropic(FakeAnthropicServer):
    """The fake Messages API, adding up the usage it reports by caller."""

    def __init__(self, model: ConversationModel) -> None:
        super().__init__(responder=model)
        self.model = model
        self.tokens: dict[str, dict[str, int]] = {}
        self.largest_brain_prompt = 0

    def _render(self, reply: AnthropicReply | str, body: dict[str, Any]) -> HTTPAnswer:
        answer = super()._render(reply, body)
        usage = answer.body.get("usage") if answer.status == 200 else None
        if isinstance(usage, dict):
            kind = self.model.kind(body)
            tally = self.tokens.setdefault(kind, {})
            for key, value in usage.items():
                if isinstance(value, int):  # not the nested breakdowns (`cache_creation`)
                    tally[key] = tally.get(key, 0) + value
            if kind == "brain":
                self.largest_brain_prompt = max(self.largest_brain_prompt, prompt_tokens(usage))
        return answer


def prompt_tokens(usage: dict[str, int]) -> int:
    keys = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
    return sum(int(usage.get(key, 0)) for key in keys)


class BrainDaemon(Daemon):
    """Soak's daemon, with `brain` keys set from the command line (defaults otherwise)."""

    def __init__(
        self, workdir: Path, telegram_url: str, anthropic_url: str, brain: dict[str, Any]
    ) -> None:
        super().__init__(workdir, telegram_url, anthropic_url, 1)
        if brain:
            config = yaml.safe_load(self.config_path.read_text(encoding="utf-8"))
            config["brain"] = brain
            self.config_path.write_text(yaml.safe_dump(config), encoding="utf-8")


def session_row(data_dir: Path) -> dict[str, Any]:
    with sqlite3.connect(data_dir / "bruce.db") as db:
        db.row_factory = sqlite3.Row
        row = db.execute("SELECT title, active_skills FROM sessions ORDER BY id LIMIT 1").fetchone()
    return dict(row) if row else {}


def brain_keys(pairs: list[str]) -> dict[str, Any]:
    keys: dict[str, Any] = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        keys[key] = yaml.safe_load(value)
    return keys


async def converse(args: argparse.Namespace) -> dict[str, Any]:
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)
    model = ConversationModel()
    anthropic = MeteredAnthropic(model)
    telegram = FakeTelegramServer()
    user = FakeUser(FIRST_USER_ID, "User0")
    results: dict[str, Any] = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "settings": {"pause_s": args.pause, "brain": brain_keys(args.brain or [])},
    }
    with tempfile.TemporaryDirectory(prefix="bruce-brain-") as tmp:
        workdir = Path(tmp)
        await telegram.start()
        await anthropic.start()
        daemon = BrainDaemon(
            workdir, telegram.base_url, anthropic.base_url, results["settings"]["brain"]
        )
        try:
            await daemon.start(within=60)
            brain_after: list[int] = []  # brain calls seen when each exchange was answered
            for number, (text, _, _) in enumerate(SCRIPT, start=1):
                telegram.private_text(user, text)
                await telegram.wait_for(lambda n=number: len(telegram.texts_to(user.id)) >= n, 60)
                await asyncio.sleep(args.pause)
                brain_after.append(model.counts["brain"])
            quiet_since = time.monotonic()
            while time.monotonic() - model.last_request < args.quiet:
                if time.monotonic() - quiet_since > 60:
                    break
                await asyncio.sleep(0.1)
            results["row"] = session_row(daemon.data_dir)
        finally:
            results["exit_code"] = await daemon.stop()
            log = workdir / "daemon.out"
            lines = log.read_text(errors="replace").splitlines() if log.exists() else []
            results["daemon_error_lines"] = [
                x for x in lines if " error " in x.lower() or "traceback" in x.lower()
            ][:5]
            reasons = [m.group(1) for x in lines if (m := BRAIN_STARTED.search(x))]
            results["brain_run_reasons"] = {r: reasons.count(r) for r in dict.fromkeys(reasons)}
            if sys.exc_info()[0] is not None:  # failing: show how the daemon's log ended
                print("\n".join(lines[-40:]), file=sys.stderr)
            await anthropic.stop()
            await telegram.stop()
    exchanges = len(SCRIPT)
    row = results.pop("row", {})
    tokens = anthropic.tokens
    agent = prompt_tokens(tokens.get("agent", {}))
    brain = prompt_tokens(tokens.get("brain", {}))
    results |= {
        "exchanges": exchanges,
        "llm_calls": dict(model.counts),
        "brain_calls_per_exchange": round(model.counts["brain"] / exchanges, 3),
        "agent_prompt_tokens": agent,
        "brain_prompt_tokens": brain,
        "brain_share_of_agent_prompt_tokens": round(brain / agent, 4) if agent else None,
        "tokens_by_caller": tokens,
        "brain_runs_briefing_chars": model.brain_briefing_chars,
        "largest_brain_prompt_tokens": anthropic.largest_brain_prompt,
        "agent_requests_not_understood": model.unknown,
        "renames": model.renames,
        "brain_calls_after_exchange": brain_after,
        "final_title": row.get("title"),
        "final_skills": json.loads(row.get("active_skills") or "[]"),
    }
    return results


def report(results: dict[str, Any]) -> None:
    calls = results["brain_calls_per_exchange"]
    share = results["brain_share_of_agent_prompt_tokens"] or 0.0
    print(f"exchanges: {results['exchanges']}   LLM calls: {results['llm_calls']}")
    print(
        f"brain calls per exchange: {calls:.3f}  (goal ≤ {CALLS_GOAL})  "
        f"{'met' if calls <= CALLS_GOAL else 'MISSED'}"
    )
    print(
        f"brain prompt tokens / agent prompt tokens: {results['brain_prompt_tokens']} / "
        f"{results['agent_prompt_tokens']} = {share:.1%}  (goal ≤ {SHARE_GOAL:.0%})  "
        f"{'met' if share <= SHARE_GOAL else 'MISSED'}"
    )
    print(f"brain runs by reason (daemon log): {results.get('brain_run_reasons') or '-'}")
    print(
        f"renames: {results['renames']}; the session ended titled {results['final_title']!r} "
        f"with skills {results['final_skills']}"
    )
    print(f"brain calls after each exchange: {results['brain_calls_after_exchange']}")
    if results["daemon_error_lines"]:
        print(f"daemon error lines: {results['daemon_error_lines']}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--pause", type=float, default=3.0, help="seconds between a reply and the next message"
    )
    parser.add_argument(
        "--quiet", type=float, default=5.0, help="end once the model saw no request this long"
    )
    parser.add_argument(
        "--brain", nargs="*", metavar="KEY=VALUE", help="brain config keys, e.g. every_exchanges=8"
    )
    parser.add_argument("--json", type=Path, help="write the results there")
    arguments = parser.parse_args()
    outcome = asyncio.run(converse(arguments))
    report(outcome)
    if arguments.json:
        arguments.json.parent.mkdir(parents=True, exist_ok=True)
        arguments.json.write_text(json.dumps(outcome, indent=2), encoding="utf-8")
        print(f"results written to {arguments.json}")
