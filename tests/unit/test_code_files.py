"""tools/code_files.py on its own: the name a file the code wrote is saved under."""

from __future__ import annotations

from bruce_bot.tools.code_files import artifact_name


def test_a_file_the_code_names_keeps_a_known_extension_or_becomes_bin() -> None:
    assert artifact_name("plot.png") == "plot.png"
    assert artifact_name("model.pkl") == "model.pkl.bin"
    assert artifact_name("../../x.html") == "x.html"
