//! `eviction-autoscaler doctor`: the installation checks (install.rs), a
//! lint of the cluster's PodDisruptionBudgets (lint.rs), and, with `--node`,
//! a drain preflight (preflight.rs). The checks are pure functions of what
//! objects.rs lists once; this file parses the arguments, reads, and prints.
//! docs/doctor.md documents every finding, the JSON output and the exit codes.

pub mod install;
pub mod lint;
pub mod objects;
pub mod preflight;
pub mod surge;

#[cfg(test)]
mod fixtures;

use std::fmt::Write as _;
use std::process::ExitCode;

use clap::{Args as ClapArgs, ValueEnum};
use kube::Client;
use serde::Serialize;

use crate::config::Behaviour;

pub use install::{check_lease, check_webhook, WebhookView, NEEDED};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Ok,
    Warn,
    Fail,
}

/// One installation check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub level: Level,
    pub what: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Text,
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Only {
    /// The installation checks only.
    Install,
    /// The budget lint only.
    Budgets,
}

/// Exit codes (docs/doctor.md).
pub const EXIT_OK: u8 = 0;
/// A drain would block, a budget lint error, or a failed installation check.
pub const EXIT_FINDINGS: u8 = 1;
/// Could not check: API error, unknown node, bad arguments (clap's own code).
pub const EXIT_CANNOT_CHECK: u8 = 2;

/// Check the installation and lint the budgets, or preflight a drain (--node).
///
/// Without --node: the installation checks, then a lint of the
/// PodDisruptionBudgets (budgets that can never allow an eviction, that
/// select no pods, pods under several budgets, surprising percentages,
/// unhealthy pods holding a budget at zero, autoscaler minimums above the
/// pods).
///
/// With --node: a drain preflight of those nodes (drained together), one
/// table per node: what kubectl drain does with each pod, the budget that
/// decides it, and whether the product surges for it ("surge 3->4") or why
/// nothing helps.
///
/// The product's scope and surge settings are read like `serve` reads them
/// (ENABLED_BY_DEFAULT, ACTIONED_NAMESPACES, ZERO_SURGE_OVERRIDE, from the
/// environment or the flags below): pass the values the server runs with.
///
/// Exit status: 0 fine (warnings allowed); 1 a drain would block, a budget
/// lint error, or a failed installation check; 2 could not check (API
/// error, unknown node, bad arguments). Details: docs/doctor.md.
#[derive(ClapArgs, Debug, Clone)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// Preflight a drain of these nodes (repeatable or comma-separated).
    #[arg(long = "node", value_name = "NAME", value_delimiter = ',')]
    pub nodes: Vec<String>,

    /// Output format; the JSON schema is in docs/doctor.md.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Text)]
    pub output: Output,

    /// Without --node: run only the installation checks or only the budget lint.
    #[arg(long, value_enum, conflicts_with = "nodes")]
    pub only: Option<Only>,

    /// Look only at the workloads of these namespaces (lint and preflight;
    /// repeatable or comma-separated). Default: all.
    #[arg(long = "only-namespace", value_name = "NS", value_delimiter = ',')]
    pub only_namespaces: Vec<String>,

    /// Namespace of the product (its ServiceAccount and Lease).
    #[arg(long, default_value = "eviction-autoscaler")]
    pub namespace: String,

    /// The product's ServiceAccount (whose permissions are checked).
    #[arg(long, default_value = "eviction-autoscaler")]
    pub service_account: String,

    #[command(flatten)]
    pub behaviour: Behaviour,
}

#[derive(Debug, thiserror::Error)]
pub enum DoctorError {
    #[error("no usable kubeconfig: {0}")]
    Kubeconfig(String),
    #[error("apiserver not reachable: {0}")]
    Unreachable(#[source] kube::Error),
    #[error(transparent)]
    Read(#[from] objects::ReadError),
    #[error("no such node: {0}")]
    UnknownNode(String),
}

/// Everything one run found. Sections not run are absent from the JSON.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// Version of this JSON layout; bumped on any incompatible change.
    pub schema: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub installation: Option<Vec<Finding>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budgets: Option<Vec<lint::LintFinding>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drain: Option<preflight::Preflight>,
    /// The process's exit status.
    pub exit_code: u8,
}

impl Report {
    fn new(
        installation: Option<Vec<Finding>>,
        budgets: Option<Vec<lint::LintFinding>>,
        drain: Option<preflight::Preflight>,
    ) -> Report {
        let failed = installation
            .iter()
            .flatten()
            .any(|f| f.level == Level::Fail)
            || budgets.iter().flatten().any(|f| f.level == Level::Fail)
            || drain.as_ref().is_some_and(|d| d.blocked);
        Report {
            schema: 1,
            installation,
            budgets,
            drain,
            exit_code: if failed { EXIT_FINDINGS } else { EXIT_OK },
        }
    }
}

/// Runs the checks `args` asks for.
pub async fn run(client: Client, args: &Args) -> Result<Report, DoctorError> {
    client
        .apiserver_version()
        .await
        .map_err(DoctorError::Unreachable)?;
    let only = (!args.only_namespaces.is_empty())
        .then(|| objects::Scope::Only(args.only_namespaces.clone()));
    if !args.nodes.is_empty() {
        let nodes = objects::nodes(&client).await?;
        for n in &args.nodes {
            if !nodes.iter().any(|x| objects::name_of(x.as_ref()) == n) {
                return Err(DoctorError::UnknownNode(n.clone()));
            }
        }
        // Only the namespaces with pods on the nodes matter.
        let scope = match only {
            Some(s) => s,
            None => objects::Scope::Only(objects::namespaces_on(&client, &args.nodes).await?),
        };
        let objs = objects::read(&client, &scope, nodes).await?;
        let view = objs.surge_view(&args.behaviour, &[]);
        let drain = preflight::preflight(&objs, &view, &args.behaviour, &args.nodes);
        return Ok(Report::new(None, None, Some(drain)));
    }
    let installation = match args.only {
        Some(Only::Budgets) => None,
        _ => Some(install::run(client.clone(), &args.namespace, &args.service_account).await),
    };
    let budgets = match args.only {
        Some(Only::Install) => None,
        _ => {
            let scope = only.unwrap_or(objects::Scope::All);
            let objs = objects::read(&client, &scope, objects::nodes(&client).await?).await?;
            let view = objs.surge_view(&args.behaviour, &[]);
            Some(lint::lint(&objs, &view, &args.behaviour))
        }
    };
    Ok(Report::new(installation, budgets, None))
}

/// The command: reads the kubeconfig, runs, prints, and returns the exit status.
pub async fn main(args: &Args) -> ExitCode {
    let result = match crate::client::infer().await {
        Ok(c) => run(c.api, args).await,
        Err(e) => Err(DoctorError::Kubeconfig(e.to_string())),
    };
    match result {
        Ok(report) => {
            let text = match args.output {
                Output::Json => serde_json::to_string_pretty(&report)
                    .map(|s| s + "\n")
                    .map_err(|e| e.to_string()),
                Output::Text => Ok(render(&report)),
            };
            // A closed or full stdout is an error to report, not a panic.
            let written = text.and_then(|t| {
                use std::io::Write;
                std::io::stdout()
                    .lock()
                    .write_all(t.as_bytes())
                    .map_err(|e| e.to_string())
            });
            match written {
                Ok(()) => ExitCode::from(report.exit_code),
                Err(e) => {
                    eprintln!("error: cannot write the report: {e}");
                    ExitCode::from(EXIT_CANNOT_CHECK)
                }
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(EXIT_CANNOT_CHECK)
        }
    }
}

fn tag(l: Level) -> &'static str {
    match l {
        Level::Ok => "ok  ",
        Level::Warn => "WARN",
        Level::Fail => "FAIL",
    }
}

/// The human output: one line per finding, one table per node.
pub fn render(r: &Report) -> String {
    let mut out = String::new();
    for f in r.installation.iter().flatten() {
        let _ = writeln!(out, "{} {}", tag(f.level), f.what);
    }
    if let Some(b) = &r.budgets {
        if b.is_empty() {
            let _ = writeln!(out, "ok   budgets: no finding");
        }
        for f in b {
            let _ = writeln!(
                out,
                "{} budget {}: {}/{}: {}",
                tag(f.level),
                f.rule,
                f.namespace,
                f.object,
                f.message
            );
        }
    }
    if let Some(d) = &r.drain {
        for n in &d.nodes {
            render_node(&mut out, n);
        }
        let blocked: usize = d.nodes.iter().map(|n| n.blocked).sum();
        if d.blocked {
            let _ = writeln!(out, "BLOCKED: the drain would stop at {blocked} pod(s)");
        } else {
            let _ = writeln!(out, "ok: the drain would complete");
        }
    }
    out
}

fn render_node(out: &mut String, n: &preflight::NodeReport) {
    use preflight::Verdict;
    let count = |v: Verdict| n.pods.iter().filter(|p| p.verdict == v).count();
    let _ = writeln!(
        out,
        "node {}{}: {} pods, {} free, {} after a surge, {} blocked, {} skipped",
        n.name,
        if n.draining { " (cordoned)" } else { "" },
        n.pods.len(),
        count(Verdict::Free),
        count(Verdict::Surge),
        count(Verdict::Blocked),
        count(Verdict::Skipped)
    );
    if n.pods.is_empty() {
        return;
    }
    let rows: Vec<[String; 5]> = n
        .pods
        .iter()
        .map(|p| {
            let verdict = match (&p.verdict, &p.surge) {
                (Verdict::Surge, Some(s)) => format!("surge {}->{}", s.from, s.to),
                (Verdict::Blocked, _) => "BLOCKED".into(),
                (Verdict::Free, _) => "free".into(),
                (Verdict::Skipped, _) => "skipped".into(),
                (Verdict::Surge, None) => "surge".into(),
            };
            let mut why = p.reason.clone();
            if !p.needs.is_empty() {
                why = format!("(needs {}) {why}", p.needs.join(" "));
            }
            [
                format!("{}/{}", p.namespace, p.name),
                p.owner.clone(),
                if p.pdbs.is_empty() {
                    "-".into()
                } else {
                    p.pdbs.join(",")
                },
                verdict,
                why,
            ]
        })
        .collect();
    let header = ["POD", "OWNER", "PDB", "VERDICT", "WHY"];
    let mut width = [0usize; 4];
    for (i, w) in width.iter_mut().enumerate() {
        *w = rows
            .iter()
            .map(|r| r[i].len())
            .chain([header[i].len()])
            .max()
            .unwrap_or(0);
    }
    let line = |cells: [&str; 5]| {
        format!(
            "  {:w0$}  {:w1$}  {:w2$}  {:w3$}  {}",
            cells[0],
            cells[1],
            cells[2],
            cells[3],
            cells[4],
            w0 = width[0],
            w1 = width[1],
            w2 = width[2],
            w3 = width[3]
        )
    };
    let _ = writeln!(out, "{}", line(header));
    for r in &rows {
        let _ = writeln!(out, "{}", line([&r[0], &r[1], &r[2], &r[3], &r[4]]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use preflight::{NodeReport, PodReport, Preflight, SurgePlan, Verdict};
    use serde_json::json;

    fn pod(
        name: &str,
        verdict: Verdict,
        surge: Option<(i32, i32)>,
        needs: &[&'static str],
    ) -> PodReport {
        PodReport {
            namespace: "demo".into(),
            name: name.into(),
            owner: "Deployment/web".into(),
            needs: needs.to_vec(),
            pdbs: vec!["web".into()],
            verdict,
            surge: surge.map(|(from, to)| SurgePlan {
                deployment: "web".into(),
                from,
                to,
                under_way: false,
                object: "Deployment/web".into(),
            }),
            reason: format!("because {name}"),
        }
    }

    fn drain(blocked: bool) -> Preflight {
        let mut pods = vec![
            pod("a-long-pod-name", Verdict::Surge, Some((3, 4)), &[]),
            pod("b", Verdict::Free, None, &["--force"]),
        ];
        if blocked {
            pods.push(pod("c", Verdict::Blocked, None, &[]));
        }
        Preflight {
            nodes: vec![NodeReport {
                name: "n1".into(),
                draining: true,
                blocked: usize::from(blocked),
                pods,
            }],
            blocked,
        }
    }

    #[test]
    fn exit_codes() {
        let warn = lint::LintFinding {
            level: Level::Warn,
            rule: "selects-no-pods",
            namespace: "demo".into(),
            object: "PodDisruptionBudget/x".into(),
            message: "m".into(),
        };
        let fail = lint::LintFinding {
            level: Level::Fail,
            ..warn.clone()
        };
        let ok = Finding {
            level: Level::Ok,
            what: "fine".into(),
        };
        let bad = Finding {
            level: Level::Fail,
            what: "broken".into(),
        };
        let rows = [
            (
                Report::new(Some(vec![ok.clone()]), Some(vec![warn.clone()]), None),
                EXIT_OK,
            ),
            (
                Report::new(Some(vec![ok.clone()]), Some(vec![fail]), None),
                EXIT_FINDINGS,
            ),
            (
                Report::new(Some(vec![bad]), Some(vec![warn]), None),
                EXIT_FINDINGS,
            ),
            (Report::new(None, None, Some(drain(false))), EXIT_OK),
            (Report::new(None, None, Some(drain(true))), EXIT_FINDINGS),
        ];
        for (i, (r, want)) in rows.iter().enumerate() {
            assert_eq!(r.exit_code, *want, "row {i}");
        }
    }

    #[test]
    fn node_table() {
        let text = render(&Report::new(None, None, Some(drain(true))));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "node n1 (cordoned): 3 pods, 1 free, 1 after a surge, 1 blocked, 0 skipped"
        );
        assert_eq!(
            lines[1],
            "  POD                   OWNER           PDB  VERDICT     WHY"
        );
        assert_eq!(
            lines[2],
            "  demo/a-long-pod-name  Deployment/web  web  surge 3->4  because a-long-pod-name"
        );
        assert_eq!(
            lines[3],
            "  demo/b                Deployment/web  web  free        (needs --force) because b"
        );
        assert!(lines[4].contains("BLOCKED"), "{text}");
        assert_eq!(lines[5], "BLOCKED: the drain would stop at 1 pod(s)");
        let text = render(&Report::new(None, None, Some(drain(false))));
        assert_eq!(text.lines().last(), Some("ok: the drain would complete"));
    }

    #[test]
    fn lint_and_installation_lines() {
        let r = Report::new(
            Some(vec![Finding {
                level: Level::Ok,
                what: "CRD established".into(),
            }]),
            Some(vec![lint::LintFinding {
                level: Level::Fail,
                rule: "never-allows",
                namespace: "demo".into(),
                object: "PodDisruptionBudget/locked".into(),
                message: "maxUnavailable is 0".into(),
            }]),
            None,
        );
        assert_eq!(
            render(&r),
            "ok   CRD established\n\
             FAIL budget never-allows: demo/PodDisruptionBudget/locked: maxUnavailable is 0\n"
        );
        let clean = Report::new(None, Some(vec![]), None);
        assert_eq!(render(&clean), "ok   budgets: no finding\n");
    }

    /// The JSON layout is a documented interface (docs/doctor.md): field
    /// names and value spellings are pinned here.
    #[test]
    fn json_layout() {
        let r = Report::new(
            Some(vec![Finding {
                level: Level::Warn,
                what: "w".into(),
            }]),
            None,
            Some(drain(true)),
        );
        let v = serde_json::to_value(&r).unwrap_or_default();
        assert_eq!(
            v,
            json!({
                "schema": 1,
                "installation": [{"level": "warn", "what": "w"}],
                "drain": {
                    "blocked": true,
                    "nodes": [{
                        "name": "n1", "draining": true, "blocked": 1,
                        "pods": [
                            {"namespace": "demo", "name": "a-long-pod-name", "owner": "Deployment/web",
                             "needs": [], "pdbs": ["web"], "verdict": "surge",
                             "surge": {"deployment": "web", "from": 3, "to": 4, "underWay": false,
                                       "object": "Deployment/web"},
                             "reason": "because a-long-pod-name"},
                            {"namespace": "demo", "name": "b", "owner": "Deployment/web",
                             "needs": ["--force"], "pdbs": ["web"], "verdict": "free",
                             "surge": null, "reason": "because b"},
                            {"namespace": "demo", "name": "c", "owner": "Deployment/web",
                             "needs": [], "pdbs": ["web"], "verdict": "blocked",
                             "surge": null, "reason": "because c"}
                        ]
                    }]
                },
                "exitCode": 1
            })
        );
        let lint = serde_json::to_value(lint::LintFinding {
            level: Level::Fail,
            rule: "several-pdbs",
            namespace: "demo".into(),
            object: "Pod/x".into(),
            message: "m".into(),
        })
        .unwrap_or_default();
        assert_eq!(
            lint,
            json!({"level": "fail", "rule": "several-pdbs", "namespace": "demo", "object": "Pod/x", "message": "m"})
        );
    }
}
