"""Counts of the habits that make the Chinese edition read as a translation, per file.

    python tools/zh_stats.py [FILE ...]    (default: zh/translations/*.md, zh/book/*.md)

Columns: glosses, "中文（English）" pairs; nested, a parenthesis inside a parenthesis;
adjacent, two parentheses back to back 「）（」; long, sentences over 120 characters
(a sentence ends at 。！？ or at the end of a paragraph, list item or heading; code
blocks, display math, HTML tags (figures), table rows and link targets are not read;
inline code and math count as written).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
from zh_edition import BACK_TO_BACK, ENTRY, FENCE, NESTED, prose  # noqa: E402

GLOSS = re.compile(r"[\u4e00-\u9fff*]（[A-Za-z][^（）\u4e00-\u9fff]*）")
BREAK = re.compile(r"\n\s*\n|\n(?=\s*(?:[-*+] |\d+\. |#|>|:::))")
LONG = 120


def sentences(text: str) -> list[str]:
    """The sentences of a Markdown text, whitespace inside each collapsed."""
    text = ENTRY.sub("\n\n", FENCE.sub("\n\n", text))
    text = re.sub(r"\$\$.*?\$\$|<[^>]+>", "\n\n", text, flags=re.S)
    text = re.sub(r"\]\([^)]*\)", "]", text)
    text = "\n".join(line for line in text.splitlines() if not line.startswith("|"))
    out = []
    for block in BREAK.split(text):
        block = re.sub(r"\s*\n\s*", "", block.strip())
        out += [s for s in re.split(r"(?<=[。！？])", block) if s.strip()]
    return out


def counts(path: Path) -> tuple[int, int, int, int]:
    text = path.read_text(encoding="utf-8")
    plain = prose(text)
    long = sum(len(s) > LONG for s in sentences(text))
    return (
        len(GLOSS.findall(plain)),
        len(NESTED.findall(plain)),
        len(BACK_TO_BACK.findall(plain)),
        long,
    )


def main() -> None:
    paths = [Path(p) for p in sys.argv[1:]] or [
        *sorted((ROOT / "zh" / "translations").glob("*.md")),
        *sorted((ROOT / "zh" / "book").glob("*.md")),
    ]
    total = [0, 0, 0, 0]
    print(f"{'file':40} glosses nested adjacent long")
    for path in paths:
        row = counts(path)
        total = [a + b for a, b in zip(total, row)]
        print(f"{path.name:40} {row[0]:7} {row[1]:6} {row[2]:8} {row[3]:4}")
    print(f"{'total':40} {total[0]:7} {total[1]:6} {total[2]:8} {total[3]:4}")


if __name__ == "__main__":
    main()
