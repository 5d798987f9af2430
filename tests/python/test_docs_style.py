"""The prose of the README and docs/ (design notes aside) holds its style: no paragraph over 120
words and a median sentence of at most 22 words on every page (see docs_style.py)."""

import pytest

from docs_style import (
    MAX_MEDIAN_SENTENCE_WORDS,
    MAX_PARAGRAPH_WORDS,
    ROOT,
    pages,
    paragraphs,
    report,
    sentences,
    words,
)


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_the_page_keeps_paragraphs_and_sentences_short(page):
    long, median = report(page)
    assert not long, f"paragraphs over {MAX_PARAGRAPH_WORDS} words (line, words): {long}"
    assert median <= MAX_MEDIAN_SENTENCE_WORDS, f"median sentence {median} words"


def test_the_measure_sees_paragraphs_sentences_and_what_is_not_prose():
    text = (
        "# A heading of many words that is not a paragraph at all\n\n"
        "First sentence here. Second one, with `inline code that counts as one`.\n"
        "Same paragraph, third.\n\n"
        "- a list item is its own paragraph\n"
        "- another\n\n"
        "| a | table |\n| --- | --- |\n\n"
        "```python\nprint('code is not prose. Not at all.')\n```\n"
        "<!-- a comment -->\n"
    )
    found = paragraphs(text)
    assert [line for line, _ in found] == [3, 6, 7]
    assert [len(sentences(t)) for _, t in found] == [3, 1, 1]
    assert words("see [the guide](docs/eager.md) and `a b c`") == 5


def test_design_notes_are_the_only_pages_left_out():
    every = {ROOT / "README.md", *(ROOT / "docs").rglob("*.md")}
    left_out = every - set(pages())
    assert left_out and all("design" in p.relative_to(ROOT).parts for p in left_out)
