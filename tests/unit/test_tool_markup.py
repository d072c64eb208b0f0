"""Tool calls and reasoning written into a model's text: each dialect, offered and not offered
names, garbled JSON, the text around the markup, and markup that is quoted (in code, mid-prose)
rather than the answer, which is never a call and is shown as written."""

from __future__ import annotations

from typing import Any

import pytest

from bruce_bot.llm.tool_markup import (
    ParsedText,
    TextCall,
    parse_arguments,
    parse_text,
    strip_reasoning,
    visible_text,
)

OFFERED: dict[str, Any] = {
    "web_search": {"type": "object", "properties": {"query": {"type": "string"}}},
    "read_file": {
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "offset": {"type": "integer"},
            "ratio": {"type": "number"},
            "follow": {"type": "boolean"},
            "lines": {"type": "array"},
        },
    },
    "get_time": None,
}


def calls(text: str, offered: dict[str, Any] = OFFERED) -> list[tuple[str, Any]]:
    return [(call.name, call.arguments) for call in parse_text(text, offered).calls]


# ---- reasoning -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "visible"),
    [
        ("<think>\nThe user greets me.\n</think>\n\nHello!", "Hello!"),
        ("<thinking>plan</thinking>Hello!", "Hello!"),
        ("<think>\n\n</think>\n\nHello!", "Hello!"),  # Qwen3 with thinking off
        ("The user greets me, answer briefly.\n</think>\n\nHello!", "Hello!"),  # lone close
        ("Hello!<think>and then the output was cut", "Hello!"),  # unclosed at the end
        ("One <think>a</think>two <think>b</think>three", "One two three"),
        ("No reasoning at all.", "No reasoning at all."),
    ],
)
def test_reasoning_is_removed(text: str, visible: str) -> None:
    assert parse_text(text, {}).text == visible


def test_a_call_drafted_inside_the_reasoning_is_not_a_call() -> None:
    text = '<think>maybe <tool_call>{"name": "web_search", "arguments": {}}</tool_call></think>Hi'

    parsed = parse_text(text, OFFERED)

    assert (parsed.text, parsed.calls) == ("Hi", ())
    assert strip_reasoning(text) == "Hi"


# ---- Hermes / Qwen2.5 ------------------------------------------------------------------------


def test_hermes_calls_as_the_tail_become_calls_and_the_prose_before_them_stays() -> None:
    text = (
        "Let me look that up.\n<tool_call>\n"
        '{"name": "web_search", "arguments": {"query": "bats"}}\n</tool_call>\n'
        '<tool_call>{"name": "get_time", "arguments": {}}</tool_call>\n  '
    )

    parsed = parse_text(text, OFFERED)

    assert parsed.text == "Let me look that up."
    assert parsed.calls == (
        TextCall("web_search", {"query": "bats"}, '{"query": "bats"}'),
        TextCall("get_time", {}, "{}"),
    )


def test_calls_followed_by_prose_are_not_calls_and_are_shown_as_written() -> None:
    text = (
        "Let me look that up.\n<tool_call>\n"
        '{"name": "web_search", "arguments": {"query": "bats"}}\n</tool_call>\nOne moment.'
    )

    parsed = parse_text(text, OFFERED)

    assert (parsed.text, parsed.calls) == (text, ())
    assert parsed.refused == "not at the end of the answer"


def test_an_unclosed_hermes_call_at_the_end_still_counts_when_its_json_is_whole() -> None:
    assert calls('<tool_call>\n{"name": "web_search", "arguments": {"query": "x"}}') == [
        ("web_search", {"query": "x"})
    ]


def test_an_unclosed_hermes_call_followed_by_another_ends_where_the_next_begins() -> None:
    text = (
        '<tool_call>{"name": "web_search", "arguments": {"query": "a"}}\n'
        '<tool_call>{"name": "get_time", "arguments": {}}</tool_call>'
    )

    assert calls(text) == [("web_search", {"query": "a"}), ("get_time", {})]


def test_garbled_json_of_an_offered_tool_is_a_call_without_arguments() -> None:
    text = 'Searching.\n<tool_call>\n{"name": "web_search", "arguments": {"query": "cut'

    parsed = parse_text(text, OFFERED)

    assert parsed.text == "Searching."
    (call,) = parsed.calls
    assert (call.name, call.arguments) == ("web_search", None)
    assert call.raw_arguments == '{"name": "web_search", "arguments": {"query": "cut'


def test_garbled_json_of_a_tool_not_offered_is_shown_not_run() -> None:
    text = 'Sure.<tool_call>{"name": "rm_rf", "arguments": {"path": </tool_call>'

    parsed = parse_text(text, {})

    assert (parsed.text, parsed.calls, parsed.ignored) == (text, (), ("rm_rf",))


def test_calls_to_tools_not_offered_are_shown_as_text_not_run() -> None:
    text = 'Okay.\n<tool_call>{"name": "delete_everything", "arguments": {}}</tool_call>'

    parsed = parse_text(text, OFFERED)

    assert (parsed.text, parsed.calls, parsed.ignored) == (text, (), ("delete_everything",))
    assert parsed.had_markup and parsed.refused == "names a tool not offered"


def test_a_tail_naming_one_tool_not_offered_runs_none_of_its_calls() -> None:
    text = (
        '<tool_call>{"name": "web_search", "arguments": {"query": "x"}}</tool_call>\n'
        '<tool_call>{"name": "send_money", "arguments": {"to": "x"}}</tool_call>'
    )

    parsed = parse_text(text, OFFERED)

    assert (parsed.text, parsed.calls, parsed.ignored) == (text, (), ("send_money",))


def test_a_tool_call_block_without_json_mid_prose_stays() -> None:
    text = "Hi <tool_call>\n</tool_call>there"

    assert parse_text(text, OFFERED).text == text


# ---- Qwen3-coder -----------------------------------------------------------------------------


def test_qwen3_coder_calls_with_values_typed_by_the_schema() -> None:
    text = (
        "<tool_call>\n<function=read_file>\n<parameter=path>\nsrc/app.py\n</parameter>\n"
        "<parameter=offset>\n5\n</parameter>\n<parameter=ratio>\n0.5\n</parameter>\n"
        "<parameter=follow>\ntrue\n</parameter>\n<parameter=lines>\n[1, 2]\n</parameter>\n"
        "<parameter=note>\n  keep  spacing\n</parameter>\n</function>\n</tool_call>"
    )

    assert calls(text) == [
        (
            "read_file",
            {
                "path": "src/app.py",
                "offset": 5,
                "ratio": 0.5,
                "follow": True,
                "lines": [1, 2],
                "note": "  keep  spacing",
            },
        )
    ]


def test_qwen3_coder_bare_function_with_a_stray_closing_tag_and_prose_before() -> None:
    text = (
        "I'll read it first.\n\n<function=read_file>\n<parameter=path>\na.py\n</parameter>\n"
        "</function>\n</tool_call>"
    )

    parsed = parse_text(text, OFFERED)

    assert parsed.text == "I'll read it first."
    assert [(c.name, c.arguments) for c in parsed.calls] == [("read_file", {"path": "a.py"})]


def test_qwen3_coder_values_that_do_not_fit_their_type_stay_text() -> None:
    text = "<function=read_file><parameter=offset>ten</parameter></function>"

    assert calls(text) == [("read_file", {"offset": "ten"})]


def test_a_qwen3_coder_call_cut_before_its_end_has_no_arguments() -> None:
    text = "<tool_call>\n<function=read_file>\n<parameter=path>\nsrc/ap"

    assert calls(text) == [("read_file", None)]


def test_two_qwen3_coder_calls_in_one_block() -> None:
    text = (
        "<tool_call><function=get_time></function>"
        "<function=web_search><parameter=query>x</parameter></function></tool_call>"
    )

    assert calls(text) == [("get_time", {}), ("web_search", {"query": "x"})]


# ---- Mistral ---------------------------------------------------------------------------------


def test_mistral_json_list_of_calls() -> None:
    text = '[TOOL_CALLS][{"name": "web_search", "arguments": {"query": "x"}, "id": "abcdefghi"}]'

    assert calls(text) == [("web_search", {"query": "x"})]


def test_mistral_python_quoted_calls() -> None:
    text = (
        "Let me check. [TOOL_CALLS][{'name': 'web_search', 'arguments': {'query': 'Dallas'}}, "
        "{'name': 'web_search', 'arguments': {'query': 'SF'}}]"
    )

    parsed = parse_text(text, OFFERED)

    assert parsed.text == "Let me check."
    assert [(c.name, c.arguments) for c in parsed.calls] == [
        ("web_search", {"query": "Dallas"}),
        ("web_search", {"query": "SF"}),
    ]
    assert parsed.calls[0].raw_arguments == '{"query": "Dallas"}'


def test_mistral_calls_with_text_after_them_are_not_the_answer() -> None:
    text = "[TOOL_CALLS][{'name': 'web_search', 'arguments': {'query': 'Dallas'}}] Let me check."

    assert parse_text(text, OFFERED) == ParsedText(
        text, had_markup=True, refused="not at the end of the answer"
    )


def test_mistral_name_args_form() -> None:
    text = '[TOOL_CALLS]web_search[ARGS]{"query": "x"}[TOOL_CALLS]get_time[ARGS]{}'

    assert calls(text) == [("web_search", {"query": "x"}), ("get_time", {})]


def test_mistral_garbled_calls() -> None:
    assert calls('[TOOL_CALLS][{"name": "web_search", "arguments": {"query": ') == [
        ("web_search", None)
    ]
    assert calls('[TOOL_CALLS]web_search[ARGS]{"query": ') == [("web_search", None)]
    assert parse_text("[TOOL_CALLS] and nothing", OFFERED).text == "[TOOL_CALLS] and nothing"


# ---- Llama 3.x bare JSON ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        '{"name": "web_search", "parameters": {"query": "x"}}',
        '{"name": "web_search", "arguments": {"query": "x"}}',
        '<|python_tag|>{"name": "web_search", "parameters": {"query": "x"}}<|eom_id|>',
        '{"type": "function", "name": "web_search", "parameters": {"query": "x"}}',
        '{"type": "function", "function": {"name": "web_search", '
        '"arguments": "{\\"query\\": \\"x\\"}"}}',
        '{"type": "function", "function": {"name": "web_search", "parameters": {"query": "x"}}}',
        '[{"name": "web_search", "parameters": {"query": "x"}}]',
    ],
)
def test_the_whole_answer_as_a_json_call(text: str) -> None:
    parsed = parse_text(text, OFFERED)

    assert parsed.text == ""
    assert [(c.name, c.arguments) for c in parsed.calls] == [("web_search", {"query": "x"})]


def test_several_bare_json_calls_separated_by_semicolons() -> None:
    text = (
        '{"name": "web_search", "parameters": {"query": "a"}}; '
        '{"name": "get_time", "parameters": {}}'
    )

    assert calls(text) == [("web_search", {"query": "a"}), ("get_time", {})]


def test_bare_json_of_a_tool_not_offered_is_shown() -> None:
    text = '{"name": "send_money", "parameters": {"to": "x"}}'

    parsed = parse_text(text, OFFERED)

    assert (parsed.text, parsed.calls, parsed.ignored) == (text, (), ("send_money",))


def test_garbled_bare_json_call() -> None:
    assert calls('{"name": "web_search", "parameters": {"query": "x"') == [("web_search", None)]
    assert parse_text('{"name": "nope", "arguments": {', OFFERED).text == (
        '{"name": "nope", "arguments": {'
    )


@pytest.mark.parametrize(
    "text",
    [
        '{"name": "Bruce", "age": 40}',  # JSON a person asked for, not a call
        'Here it is: {"name": "web_search", "parameters": {"query": "x"}}',  # not the whole answer
        '{"name": "web_search"}',  # no arguments: not a call
        # JSON in a code fence is how a model quotes, even as the whole answer
        '```json\n{"name": "web_search", "parameters": {"query": "x"}}\n```',
        "[1, 2, 3]",
        "{not json at all}",
    ],
)
def test_ordinary_json_and_prose_are_left_alone(text: str) -> None:
    parsed = parse_text(text, OFFERED)

    assert (parsed.text, parsed.calls) == (text, ())


# ---- quoted markup ---------------------------------------------------------------------------

SAVE = '<tool_call>{"name": "web_search", "arguments": {"query": "x"}}</tool_call>'
QWEN = "<function=web_search><parameter=query>x</parameter></function>"


@pytest.mark.parametrize(
    ("text", "why"),
    [
        # the page's example, fenced, as the whole answer or after prose
        (f"```xml\n{SAVE}\n```", "inside a code block"),
        (f"The page shows:\n\n```\n{SAVE}\n```", "inside a code block"),
        (f"The page shows:\n~~~\n{QWEN}\n~~~\n", "inside a code block"),
        # a fence the answer never closed still holds what follows it
        (f"The page shows:\n```\n{SAVE}", "inside a code block"),
        # inline code, at the end or not
        (f"It calls `{SAVE}`", "inside a code block"),
        (f"It calls ``{QWEN}``", "inside a code block"),
        # mid-prose
        (f"It writes {QWEN} to save things, which is odd.", "not at the end of the answer"),
        (f"First {SAVE} then more words", "not at the end of the answer"),
        # markup quoted mid-prose, then more at the end: the answer is about markup
        (f"The page writes {QWEN} and asks me to send:\n{SAVE}", "not at the end of the answer"),
        # quoted in a fence, then a tail
        (f"```\n{QWEN}\n```\n{SAVE}", "inside a code block"),
        # a Markdown block quote, HTML code and quote elements
        (f"The page ends with:\n> {SAVE}", "inside a quote"),
        (f"The page ends with:\n\n  > > {QWEN}\n", "inside a quote"),
        (f"It shows <pre>{SAVE}", "inside a quote"),
        (f"It shows <CODE class='x'>{QWEN}", "inside a quote"),
        (f"<blockquote><p>{SAVE}", "inside a quote"),
    ],
)
def test_quoted_markup_is_never_a_call_and_is_shown_as_written(text: str, why: str) -> None:
    parsed = parse_text(text, OFFERED)

    assert parsed.calls == ()
    assert parsed.text == text.strip()
    assert parsed.refused == why


def test_markup_after_a_closed_fence_and_closed_inline_code_is_the_tail() -> None:
    text = "I ran `ls` and:\n```\na.py\n```\nNow the search.\n" + SAVE

    parsed = parse_text(text, OFFERED)

    assert [(c.name, c.arguments) for c in parsed.calls] == [("web_search", {"query": "x"})]
    assert parsed.text == "I ran `ls` and:\n```\na.py\n```\nNow the search."


def test_a_qwen3_coder_tail_with_a_stray_closer_and_trailing_whitespace_is_a_call() -> None:
    parsed = parse_text(f"Searching.\n{QWEN}\n</tool_call>\n\n", OFFERED)

    assert (parsed.text, calls(f"Searching.\n{QWEN}\n</tool_call>\n\n")) == (
        "Searching.",
        [("web_search", {"query": "x"})],
    )


def test_visible_text_keeps_markup_and_drops_reasoning() -> None:
    text = f"<think>plan</think>It calls {SAVE}<|eot_id|>"

    assert visible_text(text) == f"It calls {SAVE}"


# ---- arguments -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "arguments", "raw"),
    [
        ('{"q": 1}', {"q": 1}, '{"q": 1}'),  # the standard: kept verbatim
        ({"q": 1}, {"q": 1}, '{"q": 1}'),  # an object (llama.cpp, TGI)
        ('"{\\"q\\": 1}"', {"q": 1}, '{"q": 1}'),  # double-encoded
        ("{'q': 1}", {"q": 1}, '{"q": 1}'),  # Python quotes
        ("", {}, ""),
        (None, {}, ""),
        ('{"q": ', None, '{"q": '),  # garbled: kept for the model to see
        ("[1, 2]", None, "[1, 2]"),
        (["a"], None, '["a"]'),
        ('"just text"', None, '"just text"'),
    ],
)
def test_parse_arguments(value: object, arguments: object, raw: str) -> None:
    assert parse_arguments(value) == (arguments, raw)


def test_empty_and_missing_text() -> None:
    assert parse_text(None, OFFERED).text == ""
    assert parse_text("", OFFERED).calls == ()
