#!/usr/bin/env python3
"""Checks what `make demo` recorded and drew (run by demo/check.sh): the story
happened (surges up and back to the baseline, the HPA's minimum raised and
restored, ledger Degraded while its PDB allowed nothing, no demo pod left on
the drained node) and the SVG is well-formed with one panel per Deployment,
its series, the Degraded band and the drain marks.

    check.py SAMPLES.tsv MARKS.tsv DEMO.svg
"""

import csv
import sys
import xml.etree.ElementTree as ET

SVG = "{http://www.w3.org/2000/svg}"
DEPLOYMENTS = ["demo-web/web", "demo-hpa/api", "demo-strict/ledger", "demo-legacy/worker"]


def column(rows, key):
    return [int(r[key]) for r in rows if r[key] != ""]


def main():
    samples, marks, svg = sys.argv[1:4]
    failures = []

    def expect(ok, what):
        print(f"{'ok  ' if ok else 'FAIL'} {what}")
        if not ok:
            failures.append(what)

    by = {}
    with open(samples, newline="") as f:
        for row in csv.DictReader(f, delimiter="\t"):
            by.setdefault(f"{row['namespace']}/{row['deployment']}", []).append(row)
    expect(sorted(by) == sorted(DEPLOYMENTS), f"samples for {', '.join(DEPLOYMENTS)} (got {sorted(by)})")
    for name in DEPLOYMENTS:
        rows = by.get(name, [])
        expect(len(rows) >= 20, f"{name}: at least 20 samples (got {len(rows)})")
        if rows:
            expect(rows[-1]["on_drained"] == "0", f"{name}: no pod left on the drained node at the end")
    if all(by.get(n) for n in DEPLOYMENTS):
        web, api, ledger, worker = (by[n] for n in DEPLOYMENTS)
        expect(max(column(web, "replicas")) == 6, "web surged from 3 to 6 replicas (maxSurge 100%)")
        expect(max(column(web, "allowed")) > 0, "web's PDB allowed disruptions during the surge")
        expect(web[-1]["replicas"] == "3" and web[-1]["ready"] == "3", "web back to exactly 3 replicas, 3 Ready")
        expect(max(column(api, "hpa_min")) == 3, "api's HPA minReplicas raised from 2 to 3 (maxSurge 25%)")
        expect(api[-1]["hpa_min"] == "2" and api[-1]["replicas"] == "2", "api's HPA minimum and replicas back to 2")
        expect(any(r["degraded"] == "SurgeImpossible" for r in ledger), "ledger Degraded SurgeImpossible (maxUnavailable 0)")
        expect(max(column(ledger, "replicas")) == 3, "ledger surged from 2 to 3 once its PDB was fixed")
        expect(ledger[-1]["replicas"] == "2" and ledger[-1]["degraded"] == "", "ledger back to 2, not Degraded")
        expect(set(column(worker, "replicas")) == {3} and not column(worker, "allowed"),
               "worker (no opt-in) kept 3 replicas and never had a PDB")

    with open(marks) as f:
        labels = [line.rstrip("\n").split("\t", 1)[1] for line in f if "\t" in line]
    for m in ("drain 1 starts", "drain 1 gives up", "ledger PDB fixed", "drain 2 done", "all surges reverted"):
        expect(m in labels, f"mark '{m}'")

    try:
        root = ET.parse(svg).getroot()
    except (ET.ParseError, OSError) as e:
        expect(False, f"{svg} parses as XML ({e})")
        return finish(failures)
    expect(root.tag == SVG + "svg", "the picture is an <svg> document")
    panels = {g.get("data-deployment"): g for g in root.iter(SVG + "g") if g.get("class") == "panel"}
    expect(sorted(panels) == sorted(DEPLOYMENTS), f"one panel per Deployment (got {sorted(panels)})")
    for name, g in panels.items():
        series = {p.get("data-series"): p.get("d") for p in g.iter(SVG + "path") if p.get("class") == "series"}
        want = {"replicas", "ready", "on_drained"} | ({"allowed"} if name != "demo-legacy/worker" else set())
        expect(want <= set(series) and all(d and d.startswith("M") and "H" in d for d in series.values()),
               f"{name}: step lines for {', '.join(sorted(want))}")
    ledger_g = panels.get("demo-strict/ledger")
    expect(ledger_g is not None and any(r.get("class") == "degraded" for r in ledger_g.iter(SVG + "rect")),
           "ledger's panel shows its Degraded span")
    drawn = {t.text for t in root.iter(SVG + "text") if t.get("class") == "mark"}
    expect({"drain 1 starts", "drain 2 done"} <= drawn, "the drains are marked on the picture")
    return finish(failures)


def finish(failures):
    print(f"demo-check: story and picture: {len(failures)} failed" if failures else "demo-check: story and picture: all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
