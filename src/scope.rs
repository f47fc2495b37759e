//! Which namespaces the product acts in (behaviour.md section 2).

use std::collections::BTreeMap;

use crate::config::{parse_bool, Behaviour};
use crate::names;

/// The outcome for one namespace, with the reason an annotation was ignored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceScope {
    pub enabled: bool,
    /// Set when the `enable` annotation is present but not a boolean.
    pub invalid_annotation: Option<String>,
}

/// The annotation wins; otherwise, in opt-in mode, the ACTIONED_NAMESPACES
/// list; otherwise ENABLED_BY_DEFAULT. A non-boolean annotation is treated as absent.
pub fn namespace_scope(
    name: &str,
    annotations: Option<&BTreeMap<String, String>>,
    settings: &Behaviour,
) -> NamespaceScope {
    let mut invalid_annotation = None;
    if let Some(raw) = annotations.and_then(|a| a.get(names::ENABLE)) {
        match parse_bool(raw.trim()) {
            Ok(enabled) => {
                return NamespaceScope {
                    enabled,
                    invalid_annotation: None,
                }
            }
            Err(_) => invalid_annotation = Some(raw.clone()),
        }
    }
    let enabled = if settings.enabled_by_default {
        true
    } else {
        settings.actioned_namespaces.contains(name)
    };
    NamespaceScope {
        enabled,
        invalid_annotation,
    }
}

/// A Deployment opted out of PDB creation with `pdb-create: "false"`.
pub fn deployment_opted_out(annotations: Option<&BTreeMap<String, String>>) -> bool {
    annotations
        .and_then(|a| a.get(names::PDB_CREATE))
        .is_some_and(|v| parse_bool(v.trim()) == Ok(false))
}

/// The `pdb-create` value when it is not a boolean: ignored (the
/// Deployment is not opted out), and said so, like a namespace's `enable`.
pub fn invalid_opt_out(annotations: Option<&BTreeMap<String, String>>) -> Option<&str> {
    annotations
        .and_then(|a| a.get(names::PDB_CREATE))
        .map(String::as_str)
        .filter(|v| parse_bool(v.trim()).is_err())
}

/// What is said of an [`invalid_opt_out`] value.
pub fn invalid_opt_out_note(value: &str) -> String {
    format!(
        "annotation {}: {value:?} is not a boolean; ignored (the Deployment gets a PDB; \"false\" opts it out)",
        names::PDB_CREATE
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ann(v: &str) -> BTreeMap<String, String> {
        [(names::ENABLE.to_string(), v.to_string())].into()
    }

    #[test]
    fn opt_in_mode() {
        let s = Behaviour {
            actioned_namespaces: crate::config::NamespaceList(vec![
                "kube-system".into(),
                "team-a".into(),
            ]),
            ..Default::default()
        };
        assert!(namespace_scope("kube-system", None, &s).enabled);
        assert!(namespace_scope("team-a", None, &s).enabled);
        assert!(!namespace_scope("team-b", None, &s).enabled);
        assert!(namespace_scope("team-b", Some(&ann("true")), &s).enabled);
        assert!(!namespace_scope("team-a", Some(&ann("false")), &s).enabled);
    }

    #[test]
    fn opt_out_mode() {
        let s = Behaviour {
            enabled_by_default: true,
            ..Default::default()
        };
        assert!(namespace_scope("anything", None, &s).enabled);
        assert!(!namespace_scope("anything", Some(&ann("false")), &s).enabled);
        assert!(namespace_scope("anything", Some(&ann("True")), &s).enabled);
    }

    #[test]
    fn invalid_annotation_is_reported_and_ignored() {
        let s = Behaviour::default();
        let r = namespace_scope("kube-system", Some(&ann("sure")), &s);
        assert_eq!(
            r,
            NamespaceScope {
                enabled: true,
                invalid_annotation: Some("sure".into())
            }
        );
        let r = namespace_scope("other", Some(&ann("")), &s);
        assert!(!r.enabled && r.invalid_annotation.is_some());
    }

    #[test]
    fn deployment_opt_out() {
        let a: BTreeMap<String, String> =
            [(names::PDB_CREATE.to_string(), "false".to_string())].into();
        assert!(deployment_opted_out(Some(&a)));
        let a: BTreeMap<String, String> =
            [(names::PDB_CREATE.to_string(), "true".to_string())].into();
        assert!(!deployment_opted_out(Some(&a)));
        assert!(!deployment_opted_out(None));
    }

    #[test]
    fn an_opt_out_that_is_no_boolean_is_said_and_ignored() {
        let dep = |v: &str| -> BTreeMap<String, String> {
            [(names::PDB_CREATE.to_string(), v.to_string())].into()
        };
        for v in ["false", "False", "0", "true", " false "] {
            assert_eq!(invalid_opt_out(Some(&dep(v))), None, "{v}");
        }
        for v in ["no", "off", "disabled", ""] {
            assert_eq!(invalid_opt_out(Some(&dep(v))), Some(v), "{v}");
            assert!(!deployment_opted_out(Some(&dep(v))), "{v}");
        }
        assert_eq!(invalid_opt_out(None), None);
        assert!(invalid_opt_out_note("no").contains("\"no\" is not a boolean"));
    }
}
