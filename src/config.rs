//! Settings of behaviour.md section 1: environment variables with the same
//! names as flags. A bad value stops start-up with a message that names the
//! setting and the value (clap prints `invalid value 'x' for '--cooldown <COOLDOWN>'`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Args, ValueEnum};

use crate::budget::IntOrPercent;

/// Go's `strconv.ParseBool`, which the AKS extension uses for these settings.
pub fn parse_bool(s: &str) -> Result<bool, String> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(format!("{s:?} is not a boolean (true or false)")),
    }
}

/// Longest duration any setting takes: far past any sensible cooldown or
/// timeout, and far from the overflow of the clock arithmetic done with it
/// (`humantime` reads up to about 585 billion years).
pub const MAX_DURATION: Duration = Duration::from_secs(30 * 24 * 3600);

fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s.trim())
        .map_err(|e| format!("{s:?} is not a duration like 5s or 2m: {e}"))?;
    if d > MAX_DURATION {
        return Err(format!("{s:?} is longer than 30 days"));
    }
    Ok(d)
}

/// A duration that must not be 0: a period, or a time limit (0 would make
/// every request time out, or every cache stale at once).
fn parse_positive_duration(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err(format!("{s:?} must be more than 0"));
    }
    Ok(d)
}

/// `MAX_BODY_BYTES` within bounds: 0 (or a few bytes) would answer every
/// review 413 and leave the webhook inert; gigabytes would let one request
/// reserve that much memory. An AdmissionReview carries at most two objects
/// of etcd's 1.5 MiB limit.
fn parse_body_limit(s: &str) -> Result<usize, String> {
    const RANGE: std::ops::RangeInclusive<usize> = 64 * 1024..=64 * 1024 * 1024;
    let n: usize = s
        .trim()
        .parse()
        .map_err(|e| format!("{s:?} is not a byte count: {e}"))?;
    if !RANGE.contains(&n) {
        return Err(format!(
            "{n} is outside {} to {} bytes",
            RANGE.start(),
            RANGE.end()
        ));
    }
    Ok(n)
}

/// Largest `EVICTION_HOLD`: the shipped webhooks' `timeoutSeconds` is 10
/// (manifests/webhooks.yaml, the Kubernetes default), and after our answer
/// the apiserver still runs its own eviction; a hold that used the whole
/// 10 s would turn into a timeout, which `failurePolicy: Ignore` makes an
/// unchecked pass-through (safe, but the apiserver logs a failed webhook).
/// A hold that ends without room reads the apiserver again (1.5 s at most),
/// so the longest answer is 9.5 s.
pub const MAX_EVICTION_HOLD: Duration = Duration::from_secs(8);

fn parse_eviction_hold(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d > MAX_EVICTION_HOLD {
        return Err(format!(
            "{s:?} is longer than {MAX_EVICTION_HOLD:?}: the hold must stay well under \
             the webhook's timeoutSeconds (10 s)"
        ));
    }
    Ok(d)
}

fn parse_int_or_percent(s: &str) -> Result<IntOrPercent, String> {
    s.parse::<IntOrPercent>().map_err(|e| e.to_string())
}

/// A comma-separated list of namespace names.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NamespaceList(pub Vec<String>);

impl NamespaceList {
    pub fn contains(&self, ns: &str) -> bool {
        self.0.iter().any(|n| n == ns)
    }
}

fn parse_namespaces(s: &str) -> Result<NamespaceList, String> {
    let names: Vec<String> = s
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .collect();
    // A name no namespace can have ("kube-system default", "kube_system")
    // would put nothing in scope, silently.
    if let Some(bad) = names.iter().find(|n| !is_namespace_name(n)) {
        return Err(format!(
            "{bad:?} is not a namespace name (lowercase letters, digits and '-', at most 63; \
             names are separated by commas)"
        ));
    }
    Ok(NamespaceList(names))
}

/// An RFC 1123 label, as namespace names are.
fn is_namespace_name(n: &str) -> bool {
    let b = n.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b.first() != Some(&b'-')
        && b.last() != Some(&b'-')
}

/// What the product does (shared by `serve` and the controllers).
#[derive(Args, Debug, Clone)]
pub struct Behaviour {
    /// Create owned PDBs for in-scope Deployments that have none.
    #[arg(long, env = "PDB_CREATE", value_name = "PDB_CREATE", default_value = "false",
          value_parser = parse_bool, action = ArgAction::Set)]
    pub pdb_create: bool,

    /// Namespaces are in scope unless annotated `enable: "false"`.
    #[arg(long, env = "ENABLED_BY_DEFAULT", value_name = "ENABLED_BY_DEFAULT", default_value = "false",
          value_parser = parse_bool, action = ArgAction::Set)]
    pub enabled_by_default: bool,

    /// Comma-separated namespaces in scope when ENABLED_BY_DEFAULT is false.
    #[arg(long, env = "ACTIONED_NAMESPACES", value_name = "ACTIONED_NAMESPACES",
          default_value = "kube-system", value_parser = parse_namespaces)]
    pub actioned_namespaces: NamespaceList,

    /// Surge used where a Deployment's maxSurge is 0 (Recreate or explicit 0): int or percent.
    #[arg(long, env = "ZERO_SURGE_OVERRIDE", value_name = "ZERO_SURGE_OVERRIDE",
          value_parser = parse_int_or_percent, allow_hyphen_values = true)]
    pub zero_surge_override: Option<IntOrPercent>,

    /// Time after the last signal before a surge is scaled back.
    #[arg(long, env = "COOLDOWN", value_name = "COOLDOWN", default_value = "60s",
          value_parser = parse_duration)]
    pub cooldown: Duration,
}

impl Default for Behaviour {
    fn default() -> Self {
        Behaviour {
            pdb_create: false,
            enabled_by_default: false,
            actioned_namespaces: NamespaceList(vec!["kube-system".into()]),
            zero_surge_override: None,
            cooldown: Duration::from_secs(60),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// The HTTPS server.
#[derive(Args, Debug, Clone)]
pub struct ServeOpts {
    #[command(flatten)]
    pub behaviour: Behaviour,

    /// Address to listen on (HTTPS only).
    #[arg(long, env = "LISTEN", default_value = "0.0.0.0:8443")]
    pub listen: SocketAddr,

    /// PEM serving certificate chain; re-read when it changes.
    #[arg(long, env = "TLS_CERT_FILE")]
    pub tls_cert_file: PathBuf,

    /// PEM private key; re-read when it changes.
    #[arg(long, env = "TLS_KEY_FILE")]
    pub tls_key_file: PathBuf,

    /// When set, the webhook paths require a client certificate signed by
    /// this CA (health endpoints and /metrics never do); re-read when it changes.
    #[arg(long, env = "CLIENT_CA_FILE")]
    pub client_ca_file: Option<PathBuf>,

    /// Largest request body accepted; larger ones get 413.
    #[arg(long, env = "MAX_BODY_BYTES", default_value_t = 3 * 1024 * 1024, value_parser = parse_body_limit)]
    pub max_body_bytes: usize,

    /// Time limit for one request, TLS handshake and headers included.
    #[arg(long, env = "REQUEST_TIMEOUT", default_value = "10s", value_parser = parse_positive_duration)]
    pub request_timeout: Duration,

    /// On SIGTERM, how long /readyz answers 503 while requests are still
    /// served, so that endpoints and load balancers stop sending new ones
    /// before the listener closes (the Lease is released at the start).
    #[arg(long, env = "SHUTDOWN_DELAY", default_value = "5s", value_parser = parse_duration)]
    pub shutdown_delay: Duration,

    /// How often certificate files are checked for changes.
    #[arg(long, env = "CERT_RELOAD_INTERVAL", default_value = "2s", value_parser = parse_positive_duration)]
    pub cert_reload_interval: Duration,

    /// How long a watch cache may fail to list/watch before it counts as
    /// stale: evictions are then allowed unchecked and /readyz fails.
    #[arg(long, env = "WATCH_STALE_AFTER", default_value = "30s", value_parser = parse_positive_duration)]
    pub watch_stale_after: Duration,

    /// How long a blocked eviction may wait for room while a surge is under
    /// way, counted from the request's arrival; 0 turns the hold off.
    /// 6 s: a replacement that becomes Ready within it saves the drain a
    /// whole kubectl retry interval (5 s) and a place at the end of kubectl's
    /// queue. With 100 surges at once on a 2-core control plane, room came
    /// up to 5 s after an eviction's arrival, so 4 s holds expired in every
    /// drain bench and 6 s holds did not (make bench-cluster, drains;
    /// `eviction_hold_seconds`); with the live read after an expired hold
    /// (1.5 s at most), 2.5 s of the webhook's 10 s timeout stay for the
    /// apiserver.
    #[arg(long, env = "EVICTION_HOLD", value_name = "EVICTION_HOLD", default_value = "6s",
          value_parser = parse_eviction_hold)]
    pub eviction_hold: Duration,

    /// Run the controllers only while holding the Lease (several replicas).
    #[arg(long, env = "LEADER_ELECTION", default_value = "true", value_parser = parse_bool,
          action = ArgAction::Set)]
    pub leader_election: bool,

    /// How long a PDB created at admission may wait for its Deployment to appear.
    #[arg(long, env = "ORPHAN_PDB_GRACE", default_value = "60s", value_parser = parse_duration)]
    pub orphan_pdb_grace: Duration,

    /// Namespace of the Lease and of this process (the downward API's POD_NAMESPACE).
    #[arg(long, env = "POD_NAMESPACE", default_value = "eviction-autoscaler")]
    pub namespace: String,

    /// Identity in the Lease (the downward API's POD_NAME).
    #[arg(long, env = "POD_NAME")]
    pub pod_name: Option<String>,

    #[arg(long, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

impl ServeOpts {
    /// Settings that are each valid but not together. A held eviction that
    /// ends without room reads the apiserver (up to `LIVE_CHECK_TIMEOUT`),
    /// and a recount reads it before its hold too (with no hold, one read):
    /// a `REQUEST_TIMEOUT` under that cuts the answer off with a 503, and
    /// `failurePolicy: Ignore` lets the eviction through unchecked with an
    /// error in the apiserver's log.
    pub fn check(&self) -> Result<(), String> {
        let live = crate::webhook::live::LIVE_CHECK_TIMEOUT;
        // With no hold, one live read at most.
        let longest = if self.eviction_hold.is_zero() {
            live
        } else {
            self.eviction_hold.max(live) + live
        };
        if self.request_timeout <= longest {
            return Err(format!(
                "REQUEST_TIMEOUT {:?} must be longer than the longest eviction answer, {longest:?} \
                 (EVICTION_HOLD {:?} or a live read of {live:?}, then a live read): raise \
                 REQUEST_TIMEOUT or lower EVICTION_HOLD",
                self.request_timeout, self.eviction_hold
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        b: Behaviour,
    }

    fn parse(args: &[&str]) -> Result<Behaviour, String> {
        let mut v = vec!["x"];
        v.extend_from_slice(args);
        Cli::try_parse_from(v)
            .map(|c| c.b)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_match_the_spec() {
        let b = parse(&[]).unwrap();
        assert!(!b.pdb_create);
        assert!(!b.enabled_by_default);
        assert_eq!(b.actioned_namespaces.0, vec!["kube-system"]);
        assert_eq!(b.zero_surge_override, None);
        assert_eq!(b.cooldown, Duration::from_secs(60));
    }

    #[test]
    fn values_parse() {
        let b = parse(&[
            "--pdb-create",
            "true",
            "--enabled-by-default",
            "1",
            "--actioned-namespaces",
            "a, b,,c",
            "--zero-surge-override",
            "50%",
            "--cooldown",
            "2m",
        ])
        .unwrap();
        assert!(b.pdb_create && b.enabled_by_default);
        assert_eq!(b.actioned_namespaces.0, vec!["a", "b", "c"]);
        assert_eq!(b.zero_surge_override, Some(IntOrPercent::Percent(50)));
        assert_eq!(b.cooldown, Duration::from_secs(120));
        let b = parse(&["--zero-surge-override", "2", "--cooldown", "5s"]).unwrap();
        assert_eq!(b.zero_surge_override, Some(IntOrPercent::Int(2)));
        assert_eq!(b.cooldown, Duration::from_secs(5));
    }

    #[test]
    fn bad_values_name_the_setting_and_value() {
        for (args, setting, value) in [
            (["--pdb-create", "maybe"], "PDB_CREATE", "maybe"),
            (["--enabled-by-default", "yes"], "ENABLED_BY_DEFAULT", "yes"),
            (["--cooldown", "soon"], "COOLDOWN", "soon"),
            (["--cooldown", "500000000y"], "COOLDOWN", "500000000y"),
            (["--cooldown", "31days"], "COOLDOWN", "31days"),
            (["--zero-surge-override", "-3"], "ZERO_SURGE_OVERRIDE", "-3"),
            (
                ["--zero-surge-override", "lots%"],
                "ZERO_SURGE_OVERRIDE",
                "lots%",
            ),
        ] {
            let err = parse(&args).unwrap_err();
            assert!(
                err.contains(setting) && err.contains(value),
                "{args:?}: {err}"
            );
        }
    }

    #[derive(Parser, Debug)]
    struct ServeCli {
        #[command(flatten)]
        s: ServeOpts,
    }

    /// `serve`'s settings from these flags (the required ones added).
    fn serve(args: &[&str]) -> Result<ServeOpts, String> {
        let mut v = vec!["x", "--tls-cert-file", "c", "--tls-key-file", "k"];
        v.extend_from_slice(args);
        ServeCli::try_parse_from(v)
            .map(|c| c.s)
            .map_err(|e| e.to_string())
    }

    fn hold(args: &[&str]) -> Result<Duration, String> {
        serve(args).map(|s| s.eviction_hold)
    }

    #[test]
    fn eviction_hold_defaults_to_six_seconds_and_stays_under_the_webhook_timeout() {
        assert_eq!(hold(&[]), Ok(Duration::from_secs(6)));
        assert_eq!(hold(&["--eviction-hold", "0"]), Ok(Duration::ZERO));
        assert_eq!(
            hold(&["--eviction-hold", "500ms"]),
            Ok(Duration::from_millis(500))
        );
        assert_eq!(hold(&["--eviction-hold", "8s"]), Ok(MAX_EVICTION_HOLD));
        for bad in ["9s", "1m", "soon"] {
            let err = hold(&["--eviction-hold", bad]).unwrap_err();
            assert!(err.contains("EVICTION_HOLD") && err.contains(bad), "{err}");
        }
    }

    #[test]
    fn the_request_timeout_outlasts_the_longest_eviction_answer() {
        let check = |args: &[&str]| serve(args).and_then(|s| s.check());
        assert_eq!(check(&[]), Ok(()), "the defaults: 10 s against 6 + 1.5 s");
        assert_eq!(check(&["--eviction-hold", "8s"]), Ok(()));
        assert_eq!(
            check(&["--eviction-hold", "0", "--request-timeout", "2s"]),
            Ok(())
        );
        for bad in [
            &["--request-timeout", "5s"][..],
            &["--request-timeout", "7500ms"],
            &["--eviction-hold", "1s", "--request-timeout", "3s"],
            &["--eviction-hold", "0", "--request-timeout", "1500ms"],
        ] {
            let err = check(bad).unwrap_err();
            assert!(
                err.contains("REQUEST_TIMEOUT") && err.contains("EVICTION_HOLD"),
                "{err}"
            );
        }
    }

    #[test]
    fn periods_and_time_limits_are_more_than_zero() {
        for (flag, setting) in [
            ("--request-timeout", "REQUEST_TIMEOUT"),
            ("--cert-reload-interval", "CERT_RELOAD_INTERVAL"),
            ("--watch-stale-after", "WATCH_STALE_AFTER"),
        ] {
            let err = serve(&[flag, "0s"]).unwrap_err();
            assert!(err.contains(setting) && err.contains("0s"), "{err}");
            assert!(serve(&[flag, "1s"]).is_ok(), "{flag}");
        }
        assert!(serve(&["--shutdown-delay", "0s"]).is_ok());
        let err = serve(&["--orphan-pdb-grace", "100y"]).unwrap_err();
        assert!(
            err.contains("ORPHAN_PDB_GRACE") && err.contains("100y"),
            "{err}"
        );
    }

    /// 0 would make the webhook answer every review 413; gigabytes would
    /// let one request reserve that much.
    #[test]
    fn actioned_namespaces_are_namespace_names() {
        let ok = parse_namespaces(" kube-system, default ,,team-1").expect("names");
        assert!(ok.contains("kube-system") && ok.contains("default") && ok.contains("team-1"));
        for bad in [
            "kube-system default",
            "kube_system",
            "Default",
            "-a",
            &"a".repeat(64),
        ] {
            let e = parse_namespaces(bad).expect_err(bad);
            assert!(e.contains("is not a namespace name"), "{bad}: {e}");
        }
        assert!(parse_namespaces("").is_ok(), "none: nothing actioned");
    }

    #[test]
    fn the_body_limit_is_bounded() {
        for bad in ["0", "100", "3MiB", "107374182400"] {
            let err = serve(&["--max-body-bytes", bad]).unwrap_err();
            assert!(err.contains("MAX_BODY_BYTES"), "{bad}: {err}");
        }
        let ok = |v: &str| serve(&["--max-body-bytes", v]).map(|s| s.max_body_bytes);
        assert_eq!(ok("65536"), Ok(65536));
        assert_eq!(ok("67108864"), Ok(64 << 20));
        assert_eq!(serve(&[]).map(|s| s.max_body_bytes), Ok(3 << 20));
    }

    #[test]
    fn go_booleans() {
        for t in ["1", "t", "T", "true", "TRUE", "True"] {
            assert_eq!(parse_bool(t), Ok(true));
        }
        for f in ["0", "f", "F", "false", "FALSE", "False"] {
            assert_eq!(parse_bool(f), Ok(false));
        }
        assert!(parse_bool("yes").is_err());
        assert!(parse_bool("").is_err());
    }
}
