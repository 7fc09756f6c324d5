"""The history's takes grouped under their line (issue 50 item 4): every result of the same text, voice, mode and
instruction (or the same recording converted into the same voice) is listed together, newest line first, newest
take first, numbered in the order made; a page never splits a line that fits on one, and a line longer than a page
names itself again on each of its pages."""

from __future__ import annotations

from cosyvoice_mac.webui.history import PER_PAGE, history_view
from cosyvoice_mac.webui.state import HistoryEntry

CONVERSION = {"mode": "voice_conversion", "text": "", "source": "talk.wav", "source_duration_s": 3.0}


def _result(number: int, text: str = "", voice: str | None = "Anna", **facts) -> HistoryEntry:
    fields = {"mode": "zero_shot", "text": text, "voice": voice, "seed": number, "speed": 1.0, "duration_s": 1.0}
    return HistoryEntry(path=f"/out/{number:03d}.wav", created=1000.0 + number, **{**fields, **facts})


def _newest_first(entries: list[HistoryEntry]) -> list[HistoryEntry]:
    return sorted(entries, key=lambda entry: entry.created, reverse=True)  # as HistoryBook.entries gives them


def _texts(view) -> list[tuple[str, str]]:
    return [(row[-1], row[1]) for row in view.table["data"]]


def test_the_takes_of_a_line_are_listed_under_it_newest_first():
    entries = _newest_first(
        [
            _result(1, "Hello there."),
            _result(2, "Another line."),
            _result(3, "Hello there."),
            _result(4, "Hello there.", voice="Bob"),  # another voice: another line
            _result(5, "Hello there."),
            _result(6, "Hello there.", mode="instruct", instruct="speak sadly"),  # another mode: another line
            _result(7, **CONVERSION),
            _result(8, **CONVERSION),  # the same recording converted into the same voice again: a take
        ]
    )
    view = history_view("en", entries)
    assert _texts(view) == [
        ("008.wav", "🔁 converted from talk.wav (3.0 s) · take 2 of 2"),
        ("007.wav", "↳ take 1 of 2"),
        ("006.wav", "Hello there."),
        ("005.wav", "Hello there. · take 3 of 3"),
        ("003.wav", "↳ take 2 of 3"),
        ("001.wav", "↳ take 1 of 3"),
        ("004.wav", "Hello there."),
        ("002.wav", "Another line."),
    ]
    assert [file_name for _, file_name in view.picks] == [name for name, _ in _texts(view)]  # a row picks its take
    assert [row[4] for row in view.table["data"]][3:6] == [5, 3, 1]  # each take keeps its own seed
    assert "Page 1 of 1 (8 results)" in view.page_words
    assert _texts(history_view("zh", entries))[4] == ("003.wav", "↳ 第 2 条（共 3 条）")


def test_a_page_keeps_a_line_whole_and_a_longer_line_names_itself_on_each_of_its_pages():
    assert PER_PAGE == 10  # the rows counted below
    newer = [_result(100 + number, f"Line {number}.") for number in range(PER_PAGE - 2)]  # one take each
    three = [_result(number, "Three takes.") for number in (1, 2, 3)]  # would straddle the first page's end
    entries = _newest_first(newer + three)
    first, second = history_view("en", entries, 0), history_view("en", entries, 1)
    assert len(first.table["data"]) == PER_PAGE - 2  # the line does not start on a page it cannot end on
    assert _texts(second) == [
        ("003.wav", "Three takes. · take 3 of 3"),
        ("002.wav", "↳ take 2 of 3"),
        ("001.wav", "↳ take 1 of 3"),
    ]
    assert "Page 2 of 2 (11 results)" in second.page_words

    many = [_result(200 + number, "Again and again.") for number in range(PER_PAGE + 3)]
    first, second = (history_view("en", _newest_first(many + three), page) for page in (0, 1))
    assert len(first.table["data"]) == PER_PAGE
    assert _texts(first)[:2] == [("212.wav", "Again and again. · take 13 of 13"), ("211.wav", "↳ take 12 of 13")]
    assert _texts(second) == [
        ("202.wav", "Again and again. · take 3 of 13"),  # the line named again on its next page
        ("201.wav", "↳ take 2 of 13"),
        ("200.wav", "↳ take 1 of 13"),
        ("003.wav", "Three takes. · take 3 of 3"),  # a line that fits beside it
        ("002.wav", "↳ take 2 of 3"),
        ("001.wav", "↳ take 1 of 3"),
    ]
