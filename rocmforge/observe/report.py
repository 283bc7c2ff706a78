"""A build's one-page report: one self-contained HTML file, no script, no network.

The page holds the timeline (phases, steps and every ninja edge on its slot, as inline SVG),
the 20 slowest edges, the compiler cache's hit rate, the memory curve (the tree's RSS and the
largest compile job over time) and the wheel's size by library (each shared library of the
wheel, the rest together). Everything is drawn here, in Python; the page needs nothing but
itself, so it opens offline and a headless browser renders it without a console error.
"""

from __future__ import annotations

import html
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rocmforge.observe.record import Telemetry, human_bytes, ninja_logs, usage_line
from rocmforge.observe.trace import ninja_offsets, slots

WIDTH = 1100
ROW = 14
_COLORS = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1")


def wheel_sizes(wheel: Path) -> list[tuple[str, int]]:
    """The wheel's members by library: each ``.so`` (uncompressed size), then the rest."""
    out: dict[str, int] = {}
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            name = info.filename
            key = name if ".so" in name.rsplit("/", 1)[-1] else "(everything else)"
            out[key] = out.get(key, 0) + info.file_size
    return sorted(out.items(), key=lambda kv: -kv[1])


def _esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def _timeline(record: Telemetry) -> tuple[str, float]:
    """The timeline's SVG and its span in seconds."""
    rows: list[tuple[str, list[tuple[float, float, str]]]] = []
    rows.append(("phases", [(a, b, n) for n, a, b in record.phases]))
    rows.append(("steps", [(s.started - record.started, s.started - record.started + s.seconds,
                            s.label) for s in record.steps]))  # fmt: skip
    offsets = ninja_offsets(record)
    for nf, log in ninja_logs(record):
        base = offsets.get(nf.path, 0.0)
        lanes: dict[int, list[tuple[float, float, str]]] = {}
        for slot, e in slots(log.runs()):
            lanes.setdefault(slot, []).append(
                (base + e.start_ms / 1000, base + e.end_ms / 1000, e.output)
            )
        for slot in sorted(lanes):
            rows.append((f"ninja slot {slot + 1}", lanes[slot]))
    span = max([1e-3, *(b for _, items in rows for _, b, _ in items)])
    left = 110
    scale = (WIDTH - left - 10) / span
    height = ROW * len(rows) + 24
    parts = [f'<svg id="timeline" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" '
             f'height="{height}" role="img" aria-label="build timeline">']  # fmt: skip
    for i, (label, items) in enumerate(rows):
        y = i * ROW
        parts.append(f'<text x="0" y="{y + 11}" font-size="10">{_esc(label)}</text>')
        for j, (a, b, name) in enumerate(items):
            x, w = left + a * scale, max(0.5, (b - a) * scale)
            color = _COLORS[j % len(_COLORS)]
            parts.append(
                f'<rect x="{x:.1f}" y="{y + 1}" width="{w:.1f}" height="{ROW - 2}" '
                f'fill="{color}"><title>{_esc(name)}: {b - a:.2f} s</title></rect>'
            )
    for k in range(6):
        t = span * k / 5
        x = left + t * scale
        parts.append(f'<text x="{x:.0f}" y="{height - 4}" font-size="10">{t:.0f} s</text>')
    parts.append("</svg>")
    return "".join(parts), span


def _memory(record: Telemetry) -> str:
    if not record.samples:
        return "<p>no samples</p>"
    span = max(1e-3, record.samples[-1][0])
    top = max(1, *(s[1] for s in record.samples))
    h, left = 160, 60

    def line(index: int, color: str) -> str:
        pts = " ".join(
            f"{left + s[0] / span * (WIDTH - left - 10):.1f},{h - s[index] / top * (h - 10):.1f}"
            for s in record.samples
        )
        return f'<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{pts}"/>'

    return (
        f'<svg id="memory" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{h + 20}">'
        f'<text x="0" y="12" font-size="10">{_esc(human_bytes(top))}</text>'
        f'<text x="0" y="{h}" font-size="10">0</text>'
        f"{line(1, '#4e79a7')}{line(3, '#e15759')}"
        f'<text x="{left}" y="{h + 16}" font-size="10">blue: the tree\'s RSS; red: the largest '
        f"compile job; {span:.0f} s</text></svg>"
    )


def _table(head: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    th = "".join(f"<th>{_esc(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{_esc(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def report_html(
    record: Telemetry, meta: Mapping[str, Any], wheels: Sequence[Path], *, name: str
) -> str:
    """The report page of an entry: its telemetry ``record``, ``meta.json`` and wheel files."""
    timeline, span = _timeline(record)
    edges = [(nf.path, e) for nf, log in ninja_logs(record) for e in log.runs()]
    slowest = sorted(edges, key=lambda pe: -pe[1].ms)[:20]
    slow_rows = [(e.output, f"{e.ms / 1000:.2f} s", path) for path, e in slowest]
    cc = meta.get("compiler_cache")
    if isinstance(cc, Mapping):
        done = int(cc.get("hits", 0)) + int(cc.get("misses", 0))
        rate = f"{int(cc.get('hits', 0)) / done:.0%}" if done else "-"
        cache = (f"{cc.get('hits', 0)} hits of {done} cacheable compiles ({rate}); "
                 f"{cc.get('uncacheable', 0)} uncacheable")  # fmt: skip
    else:
        cache = "the build ran without the compiler cache"
    size_rows: list[tuple[object, ...]] = []
    for w in wheels:
        for member, size in wheel_sizes(w):
            size_rows.append((w.name, member, human_bytes(size)))
    step_rows = [
        (s.label, f"{s.seconds:.1f} s",
         "-" if s.cpu_seconds is None else f"{s.cpu_seconds:.1f} s",
         human_bytes(s.peak_rss), s.jobs_peak, human_bytes(s.job_peak_rss))
        for s in record.steps
    ]  # fmt: skip
    stalls = "".join(f"<li>{_esc(s)}</li>" for s in record.stalls)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>rocmforge build report: {_esc(name)}</title>
<style>
body {{ font: 13px sans-serif; margin: 16px; color: #222; }}
table {{ border-collapse: collapse; margin: 6px 0 16px; }}
td, th {{ border: 1px solid #ccc; padding: 2px 8px; text-align: left; }}
h2 {{ font-size: 15px; margin-top: 22px; }}
</style></head><body>
<h1 style="font-size:18px">{_esc(name)}</h1>
<p id="summary">{_esc(usage_line(record.summary()))}; {span:.1f} s of timeline</p>
<h2>Timeline</h2>
{timeline}
<h2>Steps</h2>
{_table(("step", "wall", "CPU", "peak RSS", "compile jobs at most", "largest job"), step_rows)}
<h2>The 20 slowest edges</h2>
{_table(("output", "time", "ninja log"), slow_rows) if slow_rows else "<p>no ninja edges</p>"}
<h2>Compiler cache</h2>
<p id="ccache">{_esc(cache)}</p>
<h2>Memory</h2>
{_memory(record)}
<h2>Wheel size by library</h2>
{_table(("wheel", "member", "size"), size_rows)}
{f"<h2>Stall warnings</h2><ul>{stalls}</ul>" if stalls else ""}
</body></html>
"""
