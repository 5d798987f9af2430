"""The prose style of the README and docs/: paragraphs and sentences, measured.

A paragraph is a run of prose lines between blank lines, outside code blocks, tables, headings
and HTML comments; a list item is its own paragraph. Sentences end at '.', '?' or '!' followed by
a space or the end of the paragraph. Inline code counts as one word.
"""

from __future__ import annotations

import pathlib
import re
import statistics

ROOT = pathlib.Path(__file__).resolve().parents[2]
MAX_PARAGRAPH_WORDS = 120
MAX_MEDIAN_SENTENCE_WORDS = 22

_INLINE_CODE = re.compile(r"`[^`]*`")
_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")
_SENTENCE_END = re.compile(r"(?<=[.?!])\s+(?=[A-Z`(\"*0-9])")
_LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+\.)\s+")


def pages() -> list[pathlib.Path]:
    """README and docs/, design notes aside."""
    docs = sorted(p for p in (ROOT / "docs").rglob("*.md") if "design" not in p.parts)
    return [ROOT / "README.md", *docs]


def paragraphs(text: str) -> list[tuple[int, str]]:
    """(first line, text) of each prose paragraph."""
    found: list[tuple[int, str]] = []
    current: list[str] = []
    start = 0
    fenced = False

    def close() -> None:
        if current:
            found.append((start, " ".join(current)))
            current.clear()

    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("```"):
            close()
            fenced = not fenced
            continue
        if fenced or not stripped or stripped.startswith(("#", "|", "<!--", ">")):
            close()
            continue
        if _LIST_ITEM.match(line):
            close()
            stripped = _LIST_ITEM.sub("", line).strip()
        if not current:
            start = number
        current.append(stripped)
    close()
    return found


def words(text: str) -> int:
    text = _LINK.sub(r"\1", _INLINE_CODE.sub("code", text))
    return len(text.split())


def sentences(paragraph: str) -> list[str]:
    flat = _INLINE_CODE.sub("code", paragraph)
    return [s for s in _SENTENCE_END.split(flat) if s.strip()]


def report(path: pathlib.Path) -> tuple[list[tuple[int, int]], float]:
    """The paragraphs over the limit (line, words) and the page's median sentence in words."""
    found = paragraphs(path.read_text())
    long = [(line, words(text)) for line, text in found if words(text) > MAX_PARAGRAPH_WORDS]
    lengths = [words(s) for _, text in found for s in sentences(text)]
    return long, statistics.median(lengths) if lengths else 0.0


if __name__ == "__main__":
    for page in pages():
        long, median = report(page)
        print(
            f"{page.relative_to(ROOT)}: median sentence {median:.1f} words; "
            f"paragraphs over {MAX_PARAGRAPH_WORDS}: {long}"
        )
