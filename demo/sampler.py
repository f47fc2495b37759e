#!/usr/bin/env python3
"""The demo's timeline: polls the apiserver (and the webhook's /metrics) about
twice a second, prints one line per change with the time since the story
began, and records every sample to a TSV file for demo/plot.py.

Python standard library only. Talks HTTPS to the apiserver with the admin
token of the local cluster's kubeconfig (tests/cluster/up.sh) over one
keep-alive connection, so a sample costs a few milliseconds, not a kubectl
start per object.

    sampler.py --cluster-dir DIR --t0 EPOCH --out samples.tsv [--interval 0.5]

Stops on SIGTERM/SIGINT. Its command line carries the cluster dir so that
tests/cluster/down.sh can tell it is ours before signalling it.
"""

import argparse
import calendar
import http.client
import json
import os
import re
import signal
import ssl
import subprocess
import sys
import time
import urllib.parse

PART_OF = "app.kubernetes.io/part-of=ea-demo"
SURGE_MARK = "evictionSurgeReplicas"
COLUMNS = ["t", "namespace", "deployment", "replicas", "ready", "allowed", "on_drained", "hpa_min", "degraded"]

BOLD, DIM, RED, GREEN, YELLOW, CYAN, RESET = (
    ("\033[1m", "\033[2m", "\033[31m", "\033[32m", "\033[33m", "\033[36m", "\033[0m")
    if sys.stdout.isatty() or os.environ.get("DEMO_COLOR") == "1"
    else ("",) * 7
)


class Api:
    """GET-only JSON client over one HTTPS connection (reopened on error)."""

    def __init__(self, url, ca_file, token=None):
        u = urllib.parse.urlparse(url)
        self.host, self.port = u.hostname, u.port or 443
        self.ctx = ssl.create_default_context(cafile=ca_file)
        self.headers = {"Accept": "application/json"}
        if token:
            self.headers["Authorization"] = "Bearer " + token
        self.conn = None

    def get(self, path, raw=False):
        for attempt in (1, 2):
            try:
                if self.conn is None:
                    self.conn = http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=5)
                self.conn.request("GET", path, headers=self.headers)
                resp = self.conn.getresponse()
                body = resp.read()
                if resp.status != 200:
                    return None
                return body.decode() if raw else json.loads(body)
            except (OSError, http.client.HTTPException, ValueError):
                self.conn = None
                if attempt == 2:
                    return None
        return None


def admin_token(kubeconfig):
    out = subprocess.run(
        ["kubectl", "--kubeconfig", kubeconfig, "config", "view", "--raw", "--minify",
         "-o", "jsonpath={.users[0].user.token}"],
        capture_output=True, text=True, check=False,
    )
    return out.stdout.strip() or None


def selector_matches(sel, labels):
    """A LabelSelector (matchLabels and matchExpressions) against pod labels."""
    if not sel:
        return False
    for k, v in (sel.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in sel.get("matchExpressions") or []:
        k, op, vals = e.get("key"), e.get("operator"), e.get("values") or []
        if op == "In" and labels.get(k) not in vals:
            return False
        if op == "NotIn" and labels.get(k) in vals:
            return False
        if op == "Exists" and k not in labels:
            return False
        if op == "DoesNotExist" and k in labels:
            return False
    return True


def degraded_reason(eas, d):
    """The reason of a True Degraded condition on the Deployment's EvictionAutoScaler, or ''."""
    for e in eas:
        if e["metadata"]["namespace"] == d["metadata"]["namespace"] and \
                (e.get("spec") or {}).get("targetName") == d["metadata"]["name"]:
            for c in (e.get("status") or {}).get("conditions") or []:
                if c.get("type") == "Degraded" and c.get("status") == "True":
                    return c.get("reason") or "Degraded"
    return ""


def short_node(n):
    return re.sub(r"^kwok-node-", "node-", n or "-")


class Sampler:
    def __init__(self, api, webhook, t0, out, drained_node):
        self.api, self.webhook, self.t0 = api, webhook, t0
        self.out, self.drained = out, drained_node
        self.prev = {}  # (ns, name) -> printed state
        self.seen_events = set()
        self.nodes = None
        self.blocked = None
        self.degraded = {}
        self.hpa_min = {}

    def say(self, t, what, text, color=""):
        print(f"{DIM}+{t:6.1f}s{RESET}  {color}{what:<22}{RESET} {text}", flush=True)

    def sample(self):
        q = "?labelSelector=" + urllib.parse.quote(PART_OF)
        deps = self.api.get("/apis/apps/v1/deployments" + q)
        pods = self.api.get("/api/v1/pods" + q)
        t = time.time() - self.t0
        if deps is None or pods is None:
            return
        namespaces = {d["metadata"]["namespace"] for d in deps["items"]}
        # Cluster-wide lists, filtered here: a handful of requests per sample
        # whatever the number of namespaces, so a sample stays well under the interval.
        lists = {}
        for key, path in (
            ("pdbs", "/apis/policy/v1/poddisruptionbudgets"),
            ("hpas", "/apis/autoscaling/v2/horizontalpodautoscalers"),
            ("eas", "/apis/eviction-autoscaler.azure.com/v1/evictionautoscalers"),
            ("events", "/apis/events.k8s.io/v1/events?fieldSelector="
             + urllib.parse.quote("reportingController=eviction-autoscaler")),
        ):
            got = self.api.get(path) or {"items": []}
            lists[key] = [o for o in got["items"] if o["metadata"].get("namespace") in namespaces]
        self.nodes_line(t)
        self.metrics_line(t)
        for d in sorted(deps["items"], key=lambda d: (d["metadata"]["namespace"], d["metadata"]["name"])):
            row = self.deployment_line(t, d, pods["items"], lists["pdbs"], lists["hpas"])
            row.append(degraded_reason(lists["eas"], d))
            self.out.write("\t".join(str(x) for x in row) + "\n")
        self.out.flush()
        self.degraded_lines(t, lists["eas"])
        self.event_lines(t, lists["events"])

    def deployment_line(self, t, d, pods, pdbs, hpas):
        ns, name = d["metadata"]["namespace"], d["metadata"]["name"]
        spec_sel = d["spec"].get("selector")
        mine = [
            p for p in pods
            if p["metadata"]["namespace"] == ns
            and selector_matches(spec_sel, p["metadata"].get("labels") or {})
            and not p["metadata"].get("deletionTimestamp")
        ]
        ready = sum(
            1 for p in mine
            if any(c.get("type") == "Ready" and c.get("status") == "True"
                   for c in (p.get("status") or {}).get("conditions") or [])
        )
        where = {}
        for p in mine:
            n = short_node(p["spec"].get("nodeName")) if p["spec"].get("nodeName") else "pending"
            where[n] = where.get(n, 0) + 1
        pdb = next(
            (b for b in pdbs if b["metadata"]["namespace"] == ns
             and selector_matches(b["spec"].get("selector"), d["spec"]["template"]["metadata"].get("labels") or {})),
            None,
        )
        allowed = (pdb.get("status") or {}).get("disruptionsAllowed") if pdb else None
        hpa = next(
            (h for h in hpas if h["metadata"]["namespace"] == ns
             and h["spec"]["scaleTargetRef"].get("name") == name),
            None,
        )
        hpa_min = hpa["spec"].get("minReplicas", 1) if hpa else None
        replicas = d["spec"].get("replicas", 1)
        surge = (d["metadata"].get("annotations") or {}).get(SURGE_MARK)
        state = {
            "replicas": replicas,
            "ready": ready,
            "allowed": "-" if allowed is None else allowed,
            "hpa min": hpa_min,
            "pods": " ".join(f"{k}:{v}" for k, v in sorted(where.items())) or "none",
        }
        key = (ns, name)
        old = self.prev.get(key)
        if old != state:
            parts = []
            for k, v in state.items():
                if v is None:
                    continue
                if old is not None and old.get(k) != v and k != "pods":
                    parts.append(f"{k} {BOLD}{old.get(k)}→{v}{RESET}")
                else:
                    parts.append(f"{k} {v}")
            color = YELLOW if surge else (RED if ready == 0 and replicas > 0 else "")
            note = f"  {YELLOW}(surged, baseline kept in the markers){RESET}" if surge and (
                old is None or old["replicas"] != replicas) else ""
            self.say(t, f"{ns}/{name}", "  ".join(parts) + note, color)
            self.prev[key] = state
        on_drained = where.get(short_node(self.drained), 0)
        return [f"{t:.2f}", ns, name, replicas, ready, "" if allowed is None else allowed,
                on_drained, "" if hpa_min is None else hpa_min]

    def nodes_line(self, t):
        nodes = self.api.get("/api/v1/nodes")
        if not nodes:
            return
        cordoned = sorted(short_node(n["metadata"]["name"]) for n in nodes["items"] if n["spec"].get("unschedulable"))
        if cordoned != self.nodes:
            if self.nodes is not None:
                added = [n for n in cordoned if n not in self.nodes]
                removed = [n for n in self.nodes if n not in cordoned]
                for n in added:
                    self.say(t, "node", f"{n} cordoned (spec.unschedulable): a surge signal", CYAN)
                for n in removed:
                    self.say(t, "node", f"{n} uncordoned", CYAN)
            self.nodes = cordoned

    def metrics_line(self, t):
        if not self.webhook:
            return
        text = self.webhook.get("/metrics", raw=True)
        if text is None:
            return
        m = re.search(r"^eviction_autoscaler_blocked_evictions_total(?:\{[^}]*\})?\s+([0-9.e+]+)", text, re.M)
        total = int(float(m.group(1))) if m else 0
        if self.blocked is not None and total > self.blocked:
            n = total - self.blocked
            self.say(t, "webhook", f"{n} eviction{'s' if n > 1 else ''} answered 429 TooManyRequests "
                     f"(retryable; {total} since the server started)", RED)
        self.blocked = total

    def degraded_lines(self, t, eas):
        for e in eas:
            key = (e["metadata"]["namespace"], e["metadata"]["name"])
            cond = next((c for c in (e.get("status") or {}).get("conditions") or [] if c.get("type") == "Degraded"), None)
            cur = (cond.get("status"), cond.get("reason"), cond.get("message")) if cond else ("False", None, None)
            prev = self.degraded.get(key)
            if cur[0] == "True" and prev != cur:
                self.say(t, f"{key[0]}/{key[1]}", f"Degraded=True {cur[1]}: {cur[2]}", RED)
            elif cur[0] != "True" and prev is not None and prev[0] == "True":
                self.say(t, f"{key[0]}/{key[1]}", "Degraded=False", GREEN)
            self.degraded[key] = cur

    def event_lines(self, t, events):
        for ev in sorted(events, key=lambda e: e.get("eventTime") or e["metadata"].get("creationTimestamp") or ""):
            uid = ev["metadata"]["uid"]
            if uid in self.seen_events:
                continue
            self.seen_events.add(uid)
            created = ev["metadata"].get("creationTimestamp")
            # Only what happened during the story (a rerun's namespaces are new).
            if created and calendar.timegm(time.strptime(created, "%Y-%m-%dT%H:%M:%SZ")) < self.t0 - 1:
                continue
            reg = ev.get("regarding") or {}
            color = RED if ev.get("type") == "Warning" else GREEN
            self.say(t, f"{reg.get('namespace')}/{reg.get('name')}",
                     f"event {BOLD}{ev.get('reason')}{RESET}: {ev.get('note', '')}", color)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cluster-dir", required=True)
    ap.add_argument("--t0", type=float, required=True, help="epoch seconds the story began")
    ap.add_argument("--out", required=True, help="samples TSV file (appended)")
    ap.add_argument("--interval", type=float, default=0.5)
    ap.add_argument("--drained-node", default="kwok-node-0")
    args = ap.parse_args()

    url, ca = os.environ.get("EA_APISERVER_URL"), os.environ.get("EA_CLUSTER_CA")
    if not url or not ca:
        sys.exit("sampler.py: source $CLUSTER_DIR/env first (EA_APISERVER_URL, EA_CLUSTER_CA)")
    api = Api(url, ca, admin_token(os.path.join(args.cluster_dir, "kubeconfig")))
    webhook = None
    wh = os.path.join(args.cluster_dir, "webhook")
    try:
        with open(os.path.join(wh, "port")) as f:
            webhook = Api(f"https://127.0.0.1:{f.read().strip()}", os.path.join(wh, "ca.crt"))
    except OSError:
        pass

    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    new = not os.path.exists(args.out) or os.path.getsize(args.out) == 0
    with open(args.out, "a") as out:
        if new:
            out.write("\t".join(COLUMNS) + "\n")
        s = Sampler(api, webhook, args.t0, out, args.drained_node)
        while not stop:
            started = time.time()
            s.sample()
            time.sleep(max(0.05, args.interval - (time.time() - started)))


if __name__ == "__main__":
    main()
