"""The lake's `experiments` table as markdown tables, for docs/ pages: generated, not
copied by hand (benchmarks.learning and benchmarks.edit_gate append the rows).

One table per experiment name, one row per experiment, oldest first: when it started,
the code it ran (`code_version`), its wall time, the settings that differ between the
rows of that name (the design each measured; settings shared by all rows are stated
once under the table), and every figure. p-values are written in scientific notation
(a p of 1e-16 is not 0), intervals as [low, high].

    python -m benchmarks.report --root LAKE [--name NAME]

Last line: {"report": "experiments", "rows": N, "names": K}.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from storage.fs import open_store
from storage.query import connect


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested settings as dotted keys (lists stay whole)."""
    if not isinstance(value, dict):
        return {prefix: value}
    out: dict[str, Any] = {}
    for key, inner in value.items():
        out |= flatten(inner, f"{prefix}.{key}" if prefix else str(key))
    return out


def cell(key: str, value: Any) -> str:
    """One figure as the table shows it."""
    if isinstance(value, list):
        return "[" + ", ".join(cell(key, v) for v in value) + "]"
    if isinstance(value, float) and (key == "p" or key.endswith("p_value") or key.endswith("_p")):
        return f"{value:.2e}" if value < 0.001 else f"{value:.3g}"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def experiment_tables(rows: list[dict[str, Any]]) -> str:
    """Markdown for `rows` (dicts with the experiments columns, settings and figures as JSON)."""
    parts = []
    for name in sorted({r["name"] for r in rows}):
        group = sorted((r for r in rows if r["name"] == name), key=lambda r: r["started_at"])
        settings = [flatten(json.loads(r["settings"] or "{}")) for r in group]
        figures = [json.loads(r["figures"] or "{}") for r in group]
        keys = sorted(set().union(*settings))
        differ = [k for k in keys if len({json.dumps(s.get(k), sort_keys=True) for s in settings}) > 1]
        figure_keys = list(dict.fromkeys(k for f in figures for k in f))
        header = ["started", "code", "wall", "settings", *figure_keys]
        lines = [f"### {name}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for r, s, f in zip(group, settings, figures):
            design = ", ".join(f"{k}={cell(k, s.get(k))}" for k in differ) or "-"
            wall = f"{r['wall_s'] / 60:.1f} min" if r["wall_s"] is not None else "-"
            row = [f"{r['started_at']:%Y-%m-%d %H:%M}", str(r["code_version"]), wall, design]
            lines.append("| " + " | ".join(row + [cell(k, f.get(k, "")) for k in figure_keys]) + " |")
        shared = [k for k in keys if k not in differ]
        if shared and len(group) > 1:
            lines += ["", f"Shared by every row: {len(shared)} settings (in each row's `settings`)."]
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def read_experiments(root: str, name: str | None = None) -> list[dict[str, Any]]:
    """The experiments rows of the lake at `root` (of one name when given)."""
    lake = connect(open_store(root))
    where, params = ("WHERE name = ?", [name]) if name else ("", [])
    relation = lake.con.execute(
        f"SELECT name, settings, figures, code_version, started_at, wall_s FROM experiments {where}", params
    )
    columns = [d[0] for d in relation.description]
    return [dict(zip(columns, values)) for values in relation.fetchall()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", required=True, help="the lake whose experiments table is reported")
    parser.add_argument("--name", help="only the experiments of this name")
    args = parser.parse_args(argv)
    rows = read_experiments(args.root, args.name)
    if rows:
        print(experiment_tables(rows))
    print(json.dumps({"report": "experiments", "rows": len(rows), "names": len({r["name"] for r in rows})}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
