//! `spec.quota` of an IP pool (docs/compatibility.md D21): a Cluster is named by `namespace/name`, and no quota is
//! negative.

use std::collections::BTreeMap;

use super::{FieldError, quote};

/// What is wrong with a pool's quota: `per_cluster` and `clusters` as written; `namespace` is a namespaced pool's
/// (its claims, and so their Clusters, are all of it).
pub fn quota_findings(
    per_cluster: Option<i32>,
    clusters: Option<&BTreeMap<String, i32>>,
    namespace: Option<&str>,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Some(n) = per_cluster.filter(|n| *n < 0) {
        errs.push(FieldError::invalid("spec.quota.perCluster", n.to_string(), "must not be negative"));
    }
    for (cluster, n) in clusters.into_iter().flatten() {
        let field = format!("spec.quota.clusters[{cluster}]");
        if let Some(detail) = cluster_name_problem(cluster, namespace) {
            errs.push(FieldError::invalid(field.clone(), quote(cluster), detail));
        }
        if *n < 0 {
            errs.push(FieldError::invalid(field, n.to_string(), "must not be negative"));
        }
    }
    errs
}

/// Why `key` names no Cluster a claim of the pool can belong to, if it does not.
fn cluster_name_problem(key: &str, namespace: Option<&str>) -> Option<String> {
    let Some((ns, name)) = key.split_once('/') else {
        return Some("must be <namespace>/<name> of a Cluster".to_owned());
    };
    if !is_dns_label(ns) {
        return Some(format!("the namespace {ns:?} is not a valid namespace name (RFC 1123 label)"));
    }
    if !is_dns_subdomain(name) {
        return Some(format!("the name {name:?} is not a valid Cluster name (RFC 1123 subdomain)"));
    }
    match namespace {
        Some(own) if own != ns => {
            Some(format!("the pool is in namespace {own:?}: its claims, and their Clusters, are all of it"))
        }
        _ => None,
    }
}

/// An RFC 1123 label, as Kubernetes names namespaces.
fn is_dns_label(s: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    (1..=63).contains(&s.len()) && s.chars().all(|c| alnum(c) || c == '-') && s.starts_with(alnum) && s.ends_with(alnum)
}

/// An RFC 1123 subdomain, as Kubernetes names most objects.
fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(errs: Vec<FieldError>) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn clusters_are_named_by_namespace_and_name_and_no_quota_is_negative() {
        let clusters: BTreeMap<String, i32> =
            [("prod/web", 4), ("prod/big.one", 0), ("web", 2), ("Prod/web", 1), ("prod/", 1), ("prod/db", -2)]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect();
        assert_eq!(
            texts(quota_findings(Some(-1), Some(&clusters), None)),
            vec![
                r#"spec.quota.perCluster: Invalid value: -1: must not be negative"#,
                r#"spec.quota.clusters[Prod/web]: Invalid value: "Prod/web": the namespace "Prod" is not a valid namespace name (RFC 1123 label)"#,
                r#"spec.quota.clusters[prod/]: Invalid value: "prod/": the name "" is not a valid Cluster name (RFC 1123 subdomain)"#,
                r#"spec.quota.clusters[prod/db]: Invalid value: -2: must not be negative"#,
                r#"spec.quota.clusters[web]: Invalid value: "web": must be <namespace>/<name> of a Cluster"#,
            ]
        );
        let fine: BTreeMap<String, i32> = [("prod/web".to_owned(), 4)].into();
        assert_eq!(texts(quota_findings(Some(0), Some(&fine), None)), Vec::<String>::new());
    }

    #[test]
    fn a_namespaced_pool_names_only_clusters_of_its_namespace() {
        let clusters: BTreeMap<String, i32> = [("prod/web".to_owned(), 4), ("dev/web".to_owned(), 1)].into();
        assert_eq!(
            texts(quota_findings(None, Some(&clusters), Some("prod"))),
            vec![
                r#"spec.quota.clusters[dev/web]: Invalid value: "dev/web": the pool is in namespace "prod": its claims, and their Clusters, are all of it"#
            ]
        );
    }
}
