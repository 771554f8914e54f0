"""``python -m coach_stream.docs_gen [--check] [--root DIR]``: write or check the pages."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from coach_stream.docs_gen import PAGES, reference_dir, render


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m coach_stream.docs_gen")
    parser.add_argument("--check", action="store_true", help="Exit 1 if a page is out of date.")
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="The repository root.")
    args = parser.parse_args(argv)
    folder = reference_dir(args.root)
    stale = []
    for page in PAGES:
        path = folder / page
        text = render(page)
        current = path.read_text(encoding="utf-8") if path.is_file() else None
        if current == text:
            continue
        if args.check:
            stale.append(str(path))
            continue
        folder.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path}")
    if stale:
        print(
            f"out of date: {', '.join(stale)}; run `python -m coach_stream.docs_gen`.",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
