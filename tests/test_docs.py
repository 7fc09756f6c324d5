"""The README and docs/ hold together: every link reaches a file (and a heading), the README's commands are the
ones run.sh runs, the Python page shows the example the front-door test runs, and every speed figure the README
quotes is in the bench/results JSON file its row cites."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
README_LIMIT_BYTES = 12 * 1024
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return {_slug(line.lstrip("#")) for line in text.splitlines() if line.startswith("#")}


def _links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return [first or second for first, second in LINK.findall(text)]


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(REPO).as_posix())
def test_every_link_reaches_a_file_and_its_heading(page):
    broken = []
    for link in _links(page):
        if re.match(r"[a-z]+:", link):  # a web address
            continue
        target, _, anchor = link.partition("#")
        path = (page.parent / target).resolve() if target else page
        if not path.exists():
            broken.append(f"{link}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
            broken.append(f"{link}: no heading '{anchor}' in {path.relative_to(REPO)}")
    assert not broken, f"{page.relative_to(REPO)}: " + "; ".join(broken)


def test_the_readme_is_short_and_names_the_commands_run_sh_runs():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.encode("utf-8")) <= README_LIMIT_BYTES
    run_sh = (REPO / "run.sh").read_text(encoding="utf-8")
    for verb in ("test", "doctor", "download"):
        assert f"bash run.sh {verb}" in readme
        assert re.search(rf"^\s*{verb}\)\s*$", run_sh, re.M), f"run.sh has no '{verb}' command"
    assert "127.0.0.1:7860" in readme


def test_the_python_page_shows_the_example_the_front_door_test_runs():
    def first_python_block(page: Path) -> str:
        return re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.S)[0]

    assert first_python_block(REPO / "docs" / "python.md") == first_python_block(REPO / "README.md")


def _numbers(value) -> list[float]:
    if isinstance(value, dict):
        return [number for item in value.values() for number in _numbers(item)]
    if isinstance(value, list):
        return [number for item in value for number in _numbers(item)]
    return [float(value)] if isinstance(value, (int, float)) and not isinstance(value, bool) else []


def test_every_speed_figure_in_the_readme_is_in_the_json_its_row_cites():
    rows = [
        line
        for page in PAGES
        for line in page.read_text(encoding="utf-8").splitlines()
        if line.startswith("|") and "bench/results/" in line
    ]
    assert rows, "the README cites no bench/results file for its speed figures"
    for row in rows:
        cited = re.search(r"`(bench/results/[^`]+\.json)`", row)
        assert cited, f"a speed row cites no JSON file: {row}"
        document = json.loads((REPO / cited.group(1)).read_text(encoding="utf-8"))
        measured = _numbers(document)
        for figure in re.findall(r"(\d+\.\d+) s\b", row):
            decimals = len(figure.split(".")[1])
            assert any(round(number, decimals) == float(figure) for number in measured), (
                f"{figure} s is not in {cited.group(1)}"
            )
        assert re.search(r"20\d\d-\d\d-\d\d", row), f"a speed row names no date: {row}"
