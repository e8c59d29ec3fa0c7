"""Regenerates the generated parts of docs/: ops.md from the capability
registry and the option table in options.md from mybackend.options.

    python tools/gen_docs.py          # rewrite
    python tools/gen_docs.py --check  # exit 1 if docs/ is stale (CI)
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
BEGIN, END = "<!-- BEGIN GENERATED -->", "<!-- END GENERATED -->"


def ops_table() -> str:
    import mybackend

    by_class: dict[str, int] = defaultdict(int)
    rows = ["| operator | class |", "|---|---|"]
    for name, op_class in mybackend.supported_ops():
        by_class[op_class] += 1
        rows.append(f"| `{name}` | {op_class} |")
    summary = ", ".join(f"{c}: {n}" for c, n in sorted(by_class.items()))
    return f"{len(rows) - 2} operators ({summary}).\n\n" + "\n".join(rows)


def options_table() -> str:
    from mybackend.options import Options

    rows = [
        "| option | type | default | changes generated code | meaning |",
        "|---|---|---|---|---|",
    ]
    for field in dataclasses.fields(Options):
        default = field.default
        rows.append(
            f"| `{field.name}` | `{field.type}` | `{default!r}` | "
            f"{'yes' if field.metadata['affects_codegen'] else 'no'} | {field.metadata['help']} |"
        )
    return "\n".join(rows)


def splice(path: Path, generated: str) -> str:
    text = path.read_text()
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{generated}\n{END}{tail}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    stale = []
    for name, table in (("ops.md", ops_table()), ("options.md", options_table())):
        path = ROOT / "docs" / name
        new = splice(path, table)
        if new != path.read_text():
            stale.append(name)
            if not args.check:
                path.write_text(new)
    if args.check and stale:
        print(f"stale generated docs: {', '.join(stale)}; run python tools/gen_docs.py")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
