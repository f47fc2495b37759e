//! PodDisruptionBudget arithmetic, mirroring upstream Kubernetes exactly:
//! `intstr.GetScaledValueFromIntOrPercent`, the disruption controller's
//! `getExpectedPodCount` / `updatePdbStatus`, and `metav1.LabelSelectorAsSelector`
//! as the eviction subresource (`eviction.go`) uses it.

use std::collections::{BTreeMap, HashMap};

type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;
use std::fmt;
use std::str::FromStr;

use k8s_openapi::api::policy::v1::PodDisruptionBudgetSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use smallvec::SmallVec;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BudgetError {
    #[error(
        "invalid int-or-percent {0:?}: want a non-negative integer or a percentage like \"25%\""
    )]
    IntOrPercent(String),
    #[error("invalid label selector: {0}")]
    Selector(String),
}

/// A non-negative integer or percentage (`3`, `25%`), as in PDBs and `maxSurge`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntOrPercent {
    Int(i32),
    Percent(i32),
}

impl IntOrPercent {
    /// Kubernetes accepts an int, or a string ending in `%`; any other string is an error.
    pub fn from_k8s(v: &IntOrString) -> Result<Self, BudgetError> {
        match v {
            IntOrString::Int(i) => Ok(IntOrPercent::Int(*i)),
            IntOrString::String(s) => match s.strip_suffix('%') {
                Some(num) => num
                    .parse::<i32>()
                    .map(IntOrPercent::Percent)
                    .map_err(|_| BudgetError::IntOrPercent(s.clone())),
                None => Err(BudgetError::IntOrPercent(s.clone())),
            },
        }
    }

    /// `GetScaledValueFromIntOrPercent`: an int is taken as is; a percentage of
    /// `total` is rounded up or down.
    pub fn scaled(self, total: i32, round_up: bool) -> i32 {
        match self {
            IntOrPercent::Int(i) => i,
            IntOrPercent::Percent(p) => {
                let product = i64::from(p) * i64::from(total);
                let v = if round_up {
                    product.div_euclid(100) + i64::from(product.rem_euclid(100) != 0)
                } else {
                    product.div_euclid(100)
                };
                v.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32
            }
        }
    }
}

impl FromStr for IntOrPercent {
    type Err = BudgetError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        let (num, percent) = match t.strip_suffix('%') {
            Some(n) => (n, true),
            None => (t, false),
        };
        let v: i32 = num
            .parse()
            .map_err(|_| BudgetError::IntOrPercent(s.to_string()))?;
        if v < 0 {
            return Err(BudgetError::IntOrPercent(s.to_string()));
        }
        Ok(if percent {
            IntOrPercent::Percent(v)
        } else {
            IntOrPercent::Int(v)
        })
    }
}

impl fmt::Display for IntOrPercent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IntOrPercent::Int(i) => write!(f, "{i}"),
            IntOrPercent::Percent(p) => write!(f, "{p}%"),
        }
    }
}

/// The budget rule of a PDB spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    MinAvailable(IntOrPercent),
    MaxUnavailable(IntOrPercent),
    /// Neither field set: the controller computes expected = desired = 0.
    None,
}

impl Rule {
    pub fn from_spec(spec: &PodDisruptionBudgetSpec) -> Result<Self, BudgetError> {
        // maxUnavailable is checked first, as the disruption controller does.
        if let Some(m) = &spec.max_unavailable {
            return Ok(Rule::MaxUnavailable(IntOrPercent::from_k8s(m)?));
        }
        if let Some(m) = &spec.min_available {
            return Ok(Rule::MinAvailable(IntOrPercent::from_k8s(m)?));
        }
        Ok(Rule::None)
    }

    /// True when the expected count comes from the controllers' scale
    /// (`getExpectedScale`) rather than from the number of selected pods.
    pub fn uses_scale(self) -> bool {
        matches!(
            self,
            Rule::MaxUnavailable(_) | Rule::MinAvailable(IntOrPercent::Percent(_))
        )
    }

    /// `getExpectedPodCount`: returns `(expectedCount, desiredHealthy)`.
    /// `pod_count` is the number of selected pods, `scale` the sum of the
    /// owning controllers' replicas.
    pub fn expected_and_desired(self, pod_count: i32, scale: i32) -> (i32, i32) {
        match self {
            Rule::MaxUnavailable(m) => {
                let desired = scale - m.scaled(scale, true);
                (scale, desired.max(0))
            }
            Rule::MinAvailable(IntOrPercent::Int(n)) => (pod_count, n),
            Rule::MinAvailable(p @ IntOrPercent::Percent(_)) => (scale, p.scaled(scale, true)),
            Rule::None => (0, 0),
        }
    }
}

/// `updatePdbStatus`: disruptions allowed from current and desired healthy.
pub fn disruptions_allowed(current_healthy: i32, desired_healthy: i32, expected: i32) -> i32 {
    let allowed = current_healthy - desired_healthy;
    if expected <= 0 || allowed <= 0 {
        0
    } else {
        allowed
    }
}

/// A compiled label selector (`metav1.LabelSelectorAsSelector`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    /// A nil selector: matches nothing.
    Nothing,
    /// `{}` or requirements that are all empty: `Empty()` is true.
    Everything,
    Requirements(Vec<Requirement>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requirement {
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

impl Requirement {
    fn matches<L: LabelSet + ?Sized>(&self, labels: &L) -> bool {
        match self {
            Requirement::In(k, vs) => labels.label(k).is_some_and(|v| vs.iter().any(|x| x == v)),
            Requirement::NotIn(k, vs) => labels.label(k).is_none_or(|v| vs.iter().all(|x| x != v)),
            Requirement::Exists(k) => labels.label(k).is_some(),
            Requirement::DoesNotExist(k) => labels.label(k).is_none(),
        }
    }
}

/// The part of a label key after any prefix, and a label value that is not
/// empty (`qualifiedNameFmt`): alphanumerics at both ends, `-`, `_` and `.`
/// between, at most 63 characters.
fn qualified_part(s: &str) -> bool {
    let b = s.as_bytes();
    s.len() <= 63
        && b.first().is_some_and(u8::is_ascii_alphanumeric)
        && b.last().is_some_and(u8::is_ascii_alphanumeric)
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// `IsDNS1123Subdomain`: a key's prefix.
fn dns_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|l| {
            let b = l.as_bytes();
            b.first()
                .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
                && b.last()
                    .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        })
}

/// `labels.NewRequirement`'s checks: the key a qualified name, every value a
/// valid label value. The apiserver kept PDBs with invalid values
/// (`AllowInvalidLabelValueInSelector`), and `LabelSelectorAsSelector` fails
/// on them: such a selector protects nothing, in eviction.go and the
/// disruption controller alike.
fn check_requirement(key: &str, values: &[String]) -> Result<(), BudgetError> {
    let key_ok = match key.split_once('/') {
        Some((prefix, name)) => dns_subdomain(prefix) && qualified_part(name),
        None => qualified_part(key),
    };
    if !key_ok {
        return Err(BudgetError::Selector(format!(
            "{key:?}: not a valid label key"
        )));
    }
    match values.iter().find(|v| !v.is_empty() && !qualified_part(v)) {
        Some(v) => Err(BudgetError::Selector(format!(
            "{key}: {v:?} is not a valid label value"
        ))),
        None => Ok(()),
    }
}

impl Selector {
    pub fn compile(sel: Option<&LabelSelector>) -> Result<Self, BudgetError> {
        let Some(sel) = sel else {
            return Ok(Selector::Nothing);
        };
        let mut reqs = Vec::new();
        for (k, v) in sel.match_labels.iter().flatten() {
            let values = vec![v.clone()];
            check_requirement(k, &values)?;
            reqs.push(Requirement::In(k.clone(), values));
        }
        for e in sel.match_expressions.iter().flatten() {
            let values = e.values.clone().unwrap_or_default();
            check_requirement(&e.key, &values)?;
            let req = match e.operator.as_str() {
                "In" | "NotIn" if values.is_empty() => {
                    return Err(BudgetError::Selector(format!(
                        "{}: operator {} needs values",
                        e.key, e.operator
                    )))
                }
                "In" => Requirement::In(e.key.clone(), values),
                "NotIn" => Requirement::NotIn(e.key.clone(), values),
                "Exists" | "DoesNotExist" if !values.is_empty() => {
                    return Err(BudgetError::Selector(format!(
                        "{}: operator {} takes no values",
                        e.key, e.operator
                    )))
                }
                "Exists" => Requirement::Exists(e.key.clone()),
                "DoesNotExist" => Requirement::DoesNotExist(e.key.clone()),
                other => {
                    return Err(BudgetError::Selector(format!(
                        "{}: unknown operator {other:?}",
                        e.key
                    )))
                }
            };
            reqs.push(req);
        }
        Ok(if reqs.is_empty() {
            Selector::Everything
        } else {
            Selector::Requirements(reqs)
        })
    }

    pub fn matches<L: LabelSet + ?Sized>(&self, labels: &L) -> bool {
        match self {
            Selector::Nothing => false,
            Selector::Everything => true,
            Selector::Requirements(r) => r.iter().all(|r| r.matches(labels)),
        }
    }

    /// One label every object it matches must carry with exactly this
    /// value (the first matchLabels pair, or an `In` with one value), if any:
    /// what an index of selectors can key on.
    pub fn required_label(&self) -> Option<(&str, &str)> {
        let Selector::Requirements(reqs) = self else {
            return None;
        };
        reqs.iter().find_map(|r| match r {
            Requirement::In(k, vs) if vs.len() == 1 => Some((k.as_str(), vs[0].as_str())),
            _ => None,
        })
    }

    /// The eviction subresource's test in policy/v1 (client-go's
    /// `GetPodPodDisruptionBudgets`, eviction.go's `getPodDisruptionBudgets`:
    /// `LabelSelectorAsSelector`): a nil selector protects nothing, an empty
    /// one (`{}`) every pod of the namespace, an invalid one (which does not
    /// compile) nothing. (policy/v1beta1 let an empty selector match nothing;
    /// a PDB read through policy/v1 is never judged that way.)
    pub fn selects_for_eviction<L: LabelSet + ?Sized>(&self, labels: &L) -> bool {
        self.matches(labels)
    }
}

/// Labels a selector can be matched against: an object's label map, or a
/// cached pod's interned labels (`cache::PodLabels`).
pub trait LabelSet {
    fn label(&self, key: &str) -> Option<&str>;
    /// Calls `f` with each label (for [`SelectorIndex::candidates`]).
    fn each_label(&self, f: &mut dyn FnMut(&str, &str));
}

impl LabelSet for BTreeMap<String, String> {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
    fn each_label(&self, f: &mut dyn FnMut(&str, &str)) {
        for (k, v) in self {
            f(k, v);
        }
    }
}

/// Compiled selectors by the one label each requires
/// ([`Selector::required_label`]): a lookup tests the selectors that key on
/// one of the labels (and the few that key on none) instead of all. Shared
/// by the eviction path's per-namespace PDB index and the reconciler's plan.
#[derive(Debug, Default)]
pub struct SelectorIndex {
    /// Label key, then value: the positions of the selectors requiring it
    /// (foldhash: this is on the eviction path).
    by_label: FastMap<String, FastMap<String, Vec<usize>>>,
    /// Selectors that select for eviction but require no exact label
    /// (matchExpressions only, or empty: every pod): always tested. Nil and
    /// invalid selectors (None) protect nothing and are in neither list.
    others: Vec<usize>,
}

impl SelectorIndex {
    /// Indexes `selectors` by their position in the iteration.
    pub fn new<'s>(selectors: impl IntoIterator<Item = Option<&'s Selector>>) -> SelectorIndex {
        let mut index = SelectorIndex::default();
        for (i, sel) in selectors.into_iter().enumerate() {
            let Some(sel @ (Selector::Requirements(_) | Selector::Everything)) = sel else {
                continue;
            };
            match sel.required_label() {
                Some((k, v)) => index
                    .by_label
                    .entry(k.to_string())
                    .or_default()
                    .entry(v.to_string())
                    .or_default()
                    .push(i),
                None => index.others.push(i),
            }
        }
        index
    }

    /// The positions, ascending, of the selectors that may select these
    /// labels; each is still to be tested.
    pub fn candidates<L: LabelSet + ?Sized>(&self, labels: &L) -> SmallVec<[usize; 8]> {
        let mut hits: SmallVec<[usize; 8]> = SmallVec::new();
        labels.each_label(&mut |k, v| {
            if let Some(found) = self.by_label.get(k).and_then(|vs| vs.get(v)) {
                hits.extend(found.iter().copied());
            }
        });
        hits.extend(self.others.iter().copied());
        // Each selector is under one label at most: no duplicates to remove.
        hits.sort_unstable();
        hits
    }
}

/// Does this PDB selector protect pods with these labels, the way `eviction.go` decides?
pub fn pdb_selects<L: LabelSet + ?Sized>(selector: Option<&LabelSelector>, labels: &L) -> bool {
    Selector::compile(selector).is_ok_and(|s| s.selects_for_eviction(labels))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
    use proptest::prelude::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn expr(key: &str, op: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: if values.is_empty() {
                None
            } else {
                Some(values.iter().map(|v| v.to_string()).collect())
            },
        }
    }

    #[test]
    fn scaled_values_round_like_kubernetes() {
        // (value, total, roundUp, want), from intstr's own test table.
        let cases = [
            ("10%", 5, true, 1),
            ("10%", 5, false, 0),
            ("50%", 5, true, 3),
            ("50%", 5, false, 2),
            ("100%", 3, true, 3),
            ("0%", 7, true, 0),
            ("25%", 4, true, 1),
            ("25%", 3, true, 1),
            ("25%", 10, true, 3),
            ("80%", 3, true, 3),
            ("3", 100, true, 3),
        ];
        for (v, total, up, want) in cases {
            let iop: IntOrPercent = v.parse().unwrap();
            assert_eq!(iop.scaled(total, up), want, "{v} of {total} up={up}");
        }
    }

    #[test]
    fn k8s_int_or_string_rejects_non_percent_strings() {
        assert_eq!(
            IntOrPercent::from_k8s(&IntOrString::String("5".into())),
            Err(BudgetError::IntOrPercent("5".into()))
        );
        assert_eq!(
            IntOrPercent::from_k8s(&IntOrString::String("30%".into())),
            Ok(IntOrPercent::Percent(30))
        );
        assert_eq!(
            IntOrPercent::from_k8s(&IntOrString::Int(2)),
            Ok(IntOrPercent::Int(2))
        );
        assert!("abc".parse::<IntOrPercent>().is_err());
        assert!("-1".parse::<IntOrPercent>().is_err());
        assert!("%".parse::<IntOrPercent>().is_err());
    }

    /// The examples of "Specifying a Disruption Budget for your Application"
    /// (kubernetes.io): a StatefulSet/Deployment of scale 7 (or 3).
    #[test]
    fn documentation_examples() {
        // minAvailable 5 with 7 pods: 2 disruptions when all healthy.
        let r = Rule::MinAvailable(IntOrPercent::Int(5));
        let (exp, des) = r.expected_and_desired(7, 7);
        assert_eq!((exp, des), (7, 5));
        assert_eq!(disruptions_allowed(7, des, exp), 2);
        // minAvailable 30% of 7 → 3 (rounded up), 4 allowed.
        let r = Rule::MinAvailable(IntOrPercent::Percent(30));
        let (exp, des) = r.expected_and_desired(7, 7);
        assert_eq!((exp, des), (7, 3));
        assert_eq!(disruptions_allowed(7, des, exp), 4);
        // maxUnavailable 30% of 7 → 3 (rounded up) unavailable, desired 4.
        let r = Rule::MaxUnavailable(IntOrPercent::Percent(30));
        assert_eq!(r.expected_and_desired(7, 7), (7, 4));
        // maxUnavailable 1 of 3 → desired 2: one disruption at a time.
        let r = Rule::MaxUnavailable(IntOrPercent::Int(1));
        let (exp, des) = r.expected_and_desired(3, 3);
        assert_eq!(disruptions_allowed(3, des, exp), 1);
        // minAvailable 100% blocks every voluntary disruption.
        let r = Rule::MinAvailable(IntOrPercent::Percent(100));
        let (exp, des) = r.expected_and_desired(3, 3);
        assert_eq!(disruptions_allowed(3, des, exp), 0);
        // maxUnavailable 0 likewise.
        let r = Rule::MaxUnavailable(IntOrPercent::Int(0));
        let (exp, des) = r.expected_and_desired(3, 3);
        assert_eq!(disruptions_allowed(3, des, exp), 0);
        // maxUnavailable larger than the scale: desired clamps at 0.
        let r = Rule::MaxUnavailable(IntOrPercent::Int(10));
        assert_eq!(r.expected_and_desired(3, 3), (3, 0));
        // Expected 0 (no pods) allows nothing.
        let r = Rule::MinAvailable(IntOrPercent::Int(0));
        assert_eq!(disruptions_allowed(0, 0, r.expected_and_desired(0, 0).0), 0);
        // Neither field.
        assert_eq!(Rule::None.expected_and_desired(3, 3), (0, 0));
    }

    #[test]
    fn rule_from_spec_prefers_max_unavailable() {
        let spec = PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::String("10%".into())),
            min_available: Some(IntOrString::Int(1)),
            ..Default::default()
        };
        assert_eq!(
            Rule::from_spec(&spec),
            Ok(Rule::MaxUnavailable(IntOrPercent::Percent(10)))
        );
        assert!(Rule::MaxUnavailable(IntOrPercent::Int(1)).uses_scale());
        assert!(Rule::MinAvailable(IntOrPercent::Percent(1)).uses_scale());
        assert!(!Rule::MinAvailable(IntOrPercent::Int(1)).uses_scale());
    }

    #[test]
    fn selector_operators() {
        let l = labels(&[("app", "web"), ("tier", "front")]);
        let sel = |ml: &[(&str, &str)], ex: Vec<LabelSelectorRequirement>| LabelSelector {
            match_labels: if ml.is_empty() {
                None
            } else {
                Some(labels(ml))
            },
            match_expressions: if ex.is_empty() { None } else { Some(ex) },
        };
        let cases: Vec<(LabelSelector, bool)> = vec![
            (sel(&[("app", "web")], vec![]), true),
            (sel(&[("app", "db")], vec![]), false),
            (sel(&[], vec![expr("app", "In", &["web", "api"])]), true),
            (sel(&[], vec![expr("app", "In", &["api"])]), false),
            (sel(&[], vec![expr("app", "NotIn", &["api"])]), true),
            (sel(&[], vec![expr("app", "NotIn", &["web"])]), false),
            (sel(&[], vec![expr("missing", "NotIn", &["x"])]), true),
            (sel(&[], vec![expr("tier", "Exists", &[])]), true),
            (sel(&[], vec![expr("missing", "Exists", &[])]), false),
            (sel(&[], vec![expr("missing", "DoesNotExist", &[])]), true),
            (sel(&[], vec![expr("app", "DoesNotExist", &[])]), false),
            (
                sel(&[("app", "web")], vec![expr("tier", "In", &["back"])]),
                false,
            ),
        ];
        for (s, want) in cases {
            assert_eq!(pdb_selects(Some(&s), &l), want, "{s:?}");
        }
    }

    #[test]
    fn eviction_semantics_of_nil_empty_and_invalid_selectors() {
        let l = labels(&[("app", "web")]);
        assert!(!pdb_selects(None, &l));
        // policy/v1: `{}` protects every pod of the namespace, even one
        // without labels (the e2e agreement test shows the apiserver's 500
        // when another PDB selects the same pod).
        assert!(pdb_selects(Some(&LabelSelector::default()), &l));
        assert!(pdb_selects(
            Some(&LabelSelector::default()),
            &BTreeMap::<String, String>::new()
        ));
        assert_eq!(
            Selector::compile(Some(&LabelSelector::default())),
            Ok(Selector::Everything)
        );
        let bad = LabelSelector {
            match_expressions: Some(vec![expr("app", "In", &[])]),
            ..Default::default()
        };
        assert!(Selector::compile(Some(&bad)).is_err());
        assert!(!pdb_selects(Some(&bad), &l));
        let bad = LabelSelector {
            match_expressions: Some(vec![expr("app", "Exists", &["x"])]),
            ..Default::default()
        };
        assert!(!pdb_selects(Some(&bad), &l));
        let bad = LabelSelector {
            match_expressions: Some(vec![expr("app", "Gt", &["1"])]),
            ..Default::default()
        };
        assert!(!pdb_selects(Some(&bad), &l));
        // Values the apiserver kept from before it checked them, and keys
        // it never took: `LabelSelectorAsSelector` fails, nothing selected.
        let long = "x".repeat(64);
        let l = labels(&[("app", "web"), ("tier", "a b")]);
        for (key, op, values) in [
            ("tier", "NotIn", vec!["a b"]),
            ("app", "In", vec!["web", long.as_str()]),
            ("app", "In", vec!["web", "-web"]),
            ("app", "NotIn", vec!["web."]),
            ("-app", "Exists", vec![]),
            ("Example.com/app", "Exists", vec![]),
            ("a/b/c", "DoesNotExist", vec![]),
            ("/app", "Exists", vec![]),
        ] {
            let bad = LabelSelector {
                match_expressions: Some(vec![expr(key, op, &values)]),
                ..Default::default()
            };
            assert!(
                Selector::compile(Some(&bad)).is_err(),
                "{key} {op} {values:?}"
            );
            assert!(!pdb_selects(Some(&bad), &l), "{key} {op} {values:?}");
        }
        let bad = LabelSelector {
            match_labels: Some([("app".to_string(), "we b".to_string())].into()),
            ..Default::default()
        };
        assert!(!pdb_selects(Some(&bad), &l));
        // Valid ones at the edges still select.
        let x63 = "x".repeat(63);
        for (key, op, values) in [
            ("app", "NotIn", vec!["", "a-b_c.d", x63.as_str()]),
            ("example.com/app", "DoesNotExist", vec![]),
            ("k8s.io/x.Y_z-1", "DoesNotExist", vec![]),
            ("app", "In", vec!["web"]),
        ] {
            let ok = LabelSelector {
                match_expressions: Some(vec![expr(key, op, &values)]),
                ..Default::default()
            };
            assert!(pdb_selects(Some(&ok), &l), "{key} {op} {values:?}");
        }
    }

    proptest! {
        #[test]
        fn percent_rounding_brackets_the_exact_value(p in 0i32..=100, total in 0i32..10_000) {
            let up = IntOrPercent::Percent(p).scaled(total, true);
            let down = IntOrPercent::Percent(p).scaled(total, false);
            let exact = f64::from(p) * f64::from(total) / 100.0;
            prop_assert_eq!(up, exact.ceil() as i32);
            prop_assert_eq!(down, exact.floor() as i32);
            prop_assert!(up - down <= 1);
        }

        #[test]
        fn desired_never_exceeds_bounds(m in 0i32..200, scale in 0i32..500, pct in any::<bool>()) {
            let v = if pct { IntOrPercent::Percent(m.min(100)) } else { IntOrPercent::Int(m) };
            let (exp, des) = Rule::MaxUnavailable(v).expected_and_desired(scale, scale);
            prop_assert!(des >= 0 && des <= exp);
            let allowed = disruptions_allowed(scale, des, exp);
            prop_assert!(allowed >= 0 && allowed <= scale);
        }

        #[test]
        fn int_or_percent_roundtrips(v in 0i32..100_000, pct in any::<bool>()) {
            let x = if pct { IntOrPercent::Percent(v) } else { IntOrPercent::Int(v) };
            prop_assert_eq!(x.to_string().parse::<IntOrPercent>(), Ok(x));
        }

        #[test]
        fn match_labels_equal_in_requirements(k in "[a-z]{1,5}", v in "[a-z]{1,5}", other in "[a-z]{1,5}") {
            let l = labels(&[(k.as_str(), v.as_str())]);
            let ml = LabelSelector { match_labels: Some(labels(&[(k.as_str(), other.as_str())])), ..Default::default() };
            let ex = LabelSelector { match_expressions: Some(vec![expr(&k, "In", &[other.as_str()])]), ..Default::default() };
            prop_assert_eq!(pdb_selects(Some(&ml), &l), pdb_selects(Some(&ex), &l));
            prop_assert_eq!(pdb_selects(Some(&ml), &l), v == other);
        }
    }
}
