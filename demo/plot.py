#!/usr/bin/env python3
"""Draws the demo's samples (demo/sampler.py) as an SVG: one panel per
Deployment with its replicas, Ready pods, the PDB's disruptionsAllowed and
the pods still on the drained node over time; the drains shaded, the other
moments of the story (marks.tsv) as labelled lines. Also writes a PNG next to
it when a converter is present (rsvg-convert, ImageMagick, or the cairosvg
module); none is required.

    plot.py --samples samples.tsv --marks marks.tsv --out demo.svg
            [--describe NS/NAME=TEXT ...]

Python standard library only.
"""

import argparse
import csv
import os
import shutil
import subprocess
import sys
from xml.sax.saxutils import escape

WIDTH, LEFT, RIGHT = 1000, 70, 24
PANEL_H, PANEL_GAP, TOP, BOTTOM = 118, 44, 164, 48
SERIES = [
    # key, label, colour, width, dash, opacity, y offset (px, so equal lines stay visible)
    ("replicas", "replicas (spec)", "#2563eb", 6, "", 0.35, 0),
    ("ready", "Ready pods", "#15803d", 2.2, "", 1, 0),
    ("allowed", "PDB disruptionsAllowed", "#ea580c", 2.2, "6 4", 1, 2),
    ("on_drained", "pods on the drained node", "#6b7280", 1.6, "2 3", 1, -2),
    ("hpa_min", "HPA minReplicas", "#7c3aed", 1.6, "8 3 2 3", 1, -4),
]
DEFAULT_DESCRIBE = {
    "demo-web/web": "opted in, PDB made by eviction-autoscaler, maxSurge 100%",
    "demo-hpa/api": "opted in, HPA minReplicas 2, PDB made by eviction-autoscaler, maxSurge 25%",
    "demo-strict/ledger": "opted in, the team's own PDB: maxUnavailable 0, then fixed to minAvailable 2",
    "demo-legacy/worker": "namespace not opted in, no PDB: nothing holds its pods back",
}


def read_samples(path):
    """{ns/name: {series: [(t, value)], "degraded": [(t, reason)]}}"""
    series = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f, delimiter="\t"):
            key = f"{row['namespace']}/{row['deployment']}"
            s = series.setdefault(key, {k: [] for k, *_ in SERIES})
            t = float(row["t"])
            s.setdefault("degraded", []).append((t, row.get("degraded") or ""))
            for k, *_ in SERIES:
                v = row.get(k, "")
                s[k].append((t, int(v) if v not in ("", None) else None))
    return series


def read_marks(path):
    marks = []
    if path and os.path.exists(path):
        with open(path) as f:
            for line in f:
                if "\t" in line:
                    t, label = line.rstrip("\n").split("\t", 1)
                    marks.append((float(t), label))
    return marks


def step_path(points, x, y, dy):
    """An SVG path drawing values as steps; None (no PDB) breaks the line."""
    d, prev = [], None
    for t, v in points:
        if v is None:
            prev = None
            continue
        if prev is None:
            d.append(f"M{x(t):.1f},{y(v) + dy:.1f}")
        elif v != prev:
            d.append(f"H{x(t):.1f}V{y(v) + dy:.1f}")
        prev = v
    if prev is not None and points:
        d.append(f"H{x(points[-1][0]):.1f}")
    return "".join(d)


def degraded_spans(points):
    """[(start, end, reason)] of consecutive samples with the same non-empty reason."""
    spans, cur = [], None
    for t, reason in points:
        if cur and cur[2] != reason:
            spans.append((cur[0], t, cur[2]))
            cur = None
        if reason and cur is None:
            cur = (t, t, reason)
    if cur:
        spans.append((cur[0], points[-1][0], cur[2]))
    return spans


def annotations(s):
    """[(t, value, text)]: where a surge starts and ends, and where Ready falls by several pods at once."""
    notes = []
    reps = [(t, v) for t, v in s["replicas"] if v is not None]
    if reps:
        base = reps[0][1]
        up = None
        for t, v in reps:
            if v > base and up is None:
                up = (t, v)
                notes.append((t, v, f"surge {base}→{v}"))
            elif v == base and up is not None:
                notes.append((t, v, f"back to {base}"))
                up = None
    # A fall of Ready by more than one pod between two samples: pods that left
    # together with nothing ready to take over (no PDB to hold them back).
    # A scale back (replicas lowered) is not such a fall.
    prev = (None, None)
    for (t, v), (_, r) in zip(s["ready"], s["replicas"]):
        if None not in (v, r, *prev) and prev[1] == r and prev[0] - v > 1:
            notes.append((t, v + 0.4, f"{v} of {r} Ready: its pods were evicted together"))
        prev = (v, r)
    return notes


def render(series, marks, describe):
    order = list(describe)
    names = sorted(series, key=lambda n: (order.index(n) if n in order else len(order), n))
    tmax = max([s["ready"][-1][0] for s in series.values() if s["ready"]] + [t for t, _ in marks] + [1])
    height = TOP + len(names) * (PANEL_H + PANEL_GAP) - PANEL_GAP + BOTTOM
    plot_w = WIDTH - LEFT - RIGHT
    x = lambda t: LEFT + plot_w * t / tmax  # noqa: E731
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="12">',
        f'<rect width="{WIDTH}" height="{height}" fill="#ffffff"/>',
        f'<text x="{LEFT}" y="26" font-size="17" font-weight="bold">eviction-autoscaler: one kubectl drain, '
        f'four Deployments</text>',
    ]
    # Legend.
    lx = LEFT
    for _, label, colour, width, dash, opacity, _ in SERIES:
        out.append(f'<line x1="{lx}" y1="48" x2="{lx + 26}" y2="48" stroke="{colour}" stroke-width="{width}" '
                   f'stroke-dasharray="{dash}" stroke-opacity="{opacity}"/>')
        out.append(f'<text x="{lx + 32}" y="52">{escape(label)}</text>')
        lx += 48 + 6.3 * len(label)
    lx = LEFT
    out.append(f'<rect x="{lx}" y="62" width="22" height="14" fill="#fde68a" fill-opacity="0.55"/>')
    out.append(f'<text x="{lx + 28}" y="73">kubectl drain running</text>')
    lx += 170
    out.append(f'<rect x="{lx}" y="62" width="22" height="14" fill="#fecaca" fill-opacity="0.55"/>')
    out.append(f'<text x="{lx + 28}" y="73">Degraded condition on the EvictionAutoScaler</text>')

    # Drain spans: "... starts" up to the next mark that ends it.
    spans, start = [], None
    for t, label in marks:
        if label.endswith("starts"):
            start = t
        elif start is not None and label.startswith("drain"):
            spans.append((start, t))
            start = None
    if start is not None:
        spans.append((start, tmax))

    for i, name in enumerate(names):
        s = series[name]
        top = TOP + i * (PANEL_H + PANEL_GAP)
        ymax = max([v for k, *_ in SERIES for _, v in s[k] if v is not None] + [1])
        y = lambda v, top=top, ymax=ymax: top + PANEL_H - 6 - (PANEL_H - 16) * v / ymax  # noqa: E731
        out.append(f'<g class="panel" data-deployment="{escape(name)}">')
        out.append(f'<text x="{LEFT}" y="{top - 10}" font-size="13"><tspan font-weight="bold">{escape(name)}'
                   f'</tspan>  <tspan fill="#4b5563">{escape(describe.get(name, ""))}</tspan></text>')
        out.append(f'<rect x="{LEFT}" y="{top}" width="{plot_w}" height="{PANEL_H}" fill="#f9fafb" stroke="#d1d5db"/>')
        for a, b in spans:
            out.append(f'<rect x="{x(a):.1f}" y="{top}" width="{max(x(b) - x(a), 1):.1f}" height="{PANEL_H}" '
                       f'fill="#fde68a" fill-opacity="0.55"/>')
        for a, b, reason in degraded_spans(s.get("degraded", [])):
            out.append(f'<rect class="degraded" x="{x(a):.1f}" y="{top}" width="{max(x(b) - x(a), 1):.1f}" '
                       f'height="{PANEL_H}" fill="#fecaca" fill-opacity="0.55"/>')
            out.append(f'<text x="{x(a) + 6:.1f}" y="{top + 16}" fill="#b91c1c" font-size="11.5">'
                       f'Degraded: {escape(reason)} (no surge can help)</text>')
        step = 1 if ymax <= 8 else 2
        for v in range(0, ymax + 1, step):
            out.append(f'<line x1="{LEFT}" y1="{y(v):.1f}" x2="{LEFT + plot_w}" y2="{y(v):.1f}" stroke="#e5e7eb"/>')
            out.append(f'<text x="{LEFT - 8}" y="{y(v) + 4:.1f}" text-anchor="end" fill="#4b5563">{v}</text>')
        for t, _ in marks:
            out.append(f'<line x1="{x(t):.1f}" y1="{top}" x2="{x(t):.1f}" y2="{top + PANEL_H}" stroke="#9ca3af" '
                       f'stroke-dasharray="3 3"/>')
        for key, label, colour, width, dash, opacity, dy in SERIES:
            d = step_path(s[key], x, y, dy)
            if d:
                out.append(f'<path class="series" data-series="{key}" d="{d}" fill="none" stroke="{colour}" '
                           f'stroke-width="{width}" stroke-dasharray="{dash}" stroke-opacity="{opacity}" '
                           f'stroke-linejoin="round"/>')
        for t, v, text in annotations(s):
            ty = y(v) + 15 if v >= ymax else y(v) - 7  # below a line that runs along the top
            tx, anchor = x(t) + 12, "start"
            if tx + 6.5 * len(text) > WIDTH - RIGHT:  # keep it inside the panel
                tx, anchor = x(t) - 6, "end"
            out.append(f'<text class="note" x="{tx:.1f}" y="{ty:.1f}" font-size="11" text-anchor="{anchor}" '
                       f'fill="#111827">{escape(text)}</text>')
        out.append("</g>")

    # Time axis and the marks' labels under the last panel.
    base = TOP + len(names) * (PANEL_H + PANEL_GAP) - PANEL_GAP
    tick = 10 if tmax <= 150 else 30
    for t in range(0, int(tmax) + 1, tick):
        out.append(f'<text x="{x(t):.1f}" y="{base + 16}" text-anchor="middle" fill="#4b5563">{t}s</text>')
    out.append(f'<text x="{WIDTH - RIGHT}" y="{base + 40}" text-anchor="end" fill="#4b5563">seconds since the '
               f'timeline started</text>')
    # Labels in the band above the first panel: each on the first row where it
    # does not run into its left neighbour; right-aligned near the right edge.
    rows_end = []
    for t, label in marks:
        w = 6.2 * len(label) + 6
        right = x(t) + w > WIDTH - RIGHT
        left_edge = x(t) - w if right else x(t)
        row = next((r for r, end in enumerate(rows_end) if end < left_edge), len(rows_end))
        if row == len(rows_end):
            rows_end.append(0)
        rows_end[row] = x(t) + (0 if right else w)
        ly = 96 + 13 * row
        out.append(f'<line x1="{x(t):.1f}" y1="{ly + 3}" x2="{x(t):.1f}" y2="{TOP - 24}" stroke="#9ca3af" '
                   f'stroke-dasharray="3 3"/>')
        anchor, tx = ("end", x(t) - 3) if right else ("start", x(t) + 3)
        out.append(f'<text class="mark" x="{tx:.1f}" y="{ly}" font-size="10.5" text-anchor="{anchor}" '
                   f'fill="#374151">{escape(label)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def to_png(svg, png):
    """Converts with whatever is present; returns the tool's name or None."""
    attempts = []
    if shutil.which("rsvg-convert"):
        attempts.append(("rsvg-convert", ["rsvg-convert", "-b", "white", "-o", png, svg]))
    for tool in ("magick", "convert"):
        exe = shutil.which(tool)
        if exe:
            probe = subprocess.run([exe, "-version"], capture_output=True, text=True, check=False)
            if "ImageMagick" in probe.stdout and "not installed" not in probe.stdout + probe.stderr:
                attempts.append((tool, [exe, "-density", "110", svg, png]))
    for name, cmd in attempts:
        if subprocess.run(cmd, capture_output=True, check=False).returncode == 0 and os.path.exists(png):
            return name
    try:
        import cairosvg  # type: ignore

        cairosvg.svg2png(url=svg, write_to=png)
        return "cairosvg"
    except Exception:  # noqa: BLE001 - optional converter, any failure means "no PNG"
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", required=True)
    ap.add_argument("--marks")
    ap.add_argument("--out", required=True)
    ap.add_argument("--describe", action="append", default=[], metavar="NS/NAME=TEXT")
    ap.add_argument("--no-png", action="store_true")
    args = ap.parse_args()
    describe = dict(DEFAULT_DESCRIBE)
    for d in args.describe:
        k, _, v = d.partition("=")
        describe[k] = v
    series = read_samples(args.samples)
    if not series:
        sys.exit(f"plot.py: no samples in {args.samples}")
    with open(args.out, "w") as f:
        f.write(render(series, read_marks(args.marks), describe))
    print(f"picture: {args.out}")
    if not args.no_png:
        png = os.path.splitext(args.out)[0] + ".png"
        tool = to_png(args.out, png)
        if tool:
            print(f"picture: {png} (by {tool})")
        else:
            print("no PNG: no converter found (rsvg-convert, ImageMagick or python3 cairosvg); the SVG is the picture")


if __name__ == "__main__":
    main()
