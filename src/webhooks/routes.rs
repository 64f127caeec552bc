//! The one table of webhook routes. The HTTP router and the webhook configuration manifests are both generated from
//! it, so a webhook can never be registered at a path the server does not serve.

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations, ServiceReference, ValidatingWebhook,
    ValidatingWebhookConfiguration, WebhookClientConfig,
};
use kube::api::ObjectMeta;

use crate::api::{GROUP, POOL_VERSION, PoolKind};

/// The conversion webhook path (v1alpha1 ⇄ v1alpha2 of the IP pools).
pub const CONVERT_PATH: &str = "/convert";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// A mutating (defaulting) webhook.
    Default,
    /// A validating webhook.
    Validate,
}

/// One admission webhook: a pool kind and a purpose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdmissionRoute {
    pub kind: PoolKind,
    pub purpose: Purpose,
}

impl AdmissionRoute {
    /// The controller-runtime style path, e.g. `/validate-ipam-cluster-x-k8s-io-v1alpha2-inclusterippool`.
    pub fn path(&self) -> String {
        let verb = match self.purpose {
            Purpose::Default => "mutate",
            Purpose::Validate => "validate",
        };
        format!("/{verb}-{}-{POOL_VERSION}-{}", GROUP.replace('.', "-"), self.kind.kind().to_ascii_lowercase())
    }

    /// The webhook's name in its configuration, e.g. `validation.inclusterippool.ipam.cluster.x-k8s.io`.
    pub fn name(&self) -> String {
        let prefix = match self.purpose {
            Purpose::Default => "default",
            Purpose::Validate => "validation",
        };
        format!("{prefix}.{}.{GROUP}", self.kind.kind().to_ascii_lowercase())
    }

    pub fn operations(&self) -> Vec<String> {
        let ops: &[&str] = match self.purpose {
            Purpose::Default => &["CREATE", "UPDATE"],
            Purpose::Validate => &["CREATE", "UPDATE", "DELETE"],
        };
        ops.iter().map(|s| (*s).to_owned()).collect()
    }

    fn rule(&self) -> RuleWithOperations {
        RuleWithOperations {
            api_groups: Some(vec![GROUP.to_owned()]),
            api_versions: Some(vec![POOL_VERSION.to_owned()]),
            operations: Some(self.operations()),
            resources: Some(vec![self.kind.plural()]),
            scope: None,
        }
    }
}

/// Every admission webhook we serve: a defaulting and a validating one per pool kind.
pub fn admission_routes() -> Vec<AdmissionRoute> {
    PoolKind::ALL
        .into_iter()
        .flat_map(|kind| [Purpose::Default, Purpose::Validate].map(|purpose| AdmissionRoute { kind, purpose }))
        .collect()
}

/// Where the API server reaches the webhook server, given a path.
pub enum Endpoint<'a> {
    /// A Service (kustomize and Helm rewrite name and namespace; the port is 443).
    Service { namespace: &'a str, name: &'a str },
    /// A URL base such as `https://127.0.0.1:9443` (local runs and tests).
    Url { base: &'a str },
}

impl Endpoint<'_> {
    fn client_config(&self, path: &str, ca_bundle: Option<&[u8]>) -> WebhookClientConfig {
        let ca_bundle = ca_bundle.map(|c| k8s_openapi::ByteString(c.to_vec()));
        match self {
            Endpoint::Service { namespace, name } => WebhookClientConfig {
                ca_bundle,
                service: Some(ServiceReference {
                    name: (*name).to_owned(),
                    namespace: (*namespace).to_owned(),
                    path: Some(path.to_owned()),
                    port: None,
                }),
                url: None,
            },
            Endpoint::Url { base } => {
                WebhookClientConfig { ca_bundle, service: None, url: Some(format!("{base}{path}")) }
            }
        }
    }
}

/// The mutating and validating webhook configurations for all routes.
pub fn webhook_configurations(
    names: (&str, &str),
    endpoint: &Endpoint<'_>,
    ca_bundle: Option<&[u8]>,
) -> (MutatingWebhookConfiguration, ValidatingWebhookConfiguration) {
    let routes = admission_routes();
    let mutating = routes
        .iter()
        .filter(|r| r.purpose == Purpose::Default)
        .map(|r| MutatingWebhook {
            admission_review_versions: vec!["v1".to_owned(), "v1beta1".to_owned()],
            client_config: endpoint.client_config(&r.path(), ca_bundle),
            failure_policy: Some("Fail".to_owned()),
            match_policy: Some("Equivalent".to_owned()),
            name: r.name(),
            rules: Some(vec![r.rule()]),
            side_effects: "None".to_owned(),
            ..Default::default()
        })
        .collect();
    let validating = routes
        .iter()
        .filter(|r| r.purpose == Purpose::Validate)
        .map(|r| ValidatingWebhook {
            admission_review_versions: vec!["v1".to_owned(), "v1beta1".to_owned()],
            client_config: endpoint.client_config(&r.path(), ca_bundle),
            failure_policy: Some("Fail".to_owned()),
            match_policy: Some("Equivalent".to_owned()),
            name: r.name(),
            rules: Some(vec![r.rule()]),
            side_effects: "None".to_owned(),
            ..Default::default()
        })
        .collect();
    (
        MutatingWebhookConfiguration {
            metadata: ObjectMeta { name: Some(names.0.to_owned()), ..Default::default() },
            webhooks: Some(mutating),
        },
        ValidatingWebhookConfiguration {
            metadata: ObjectMeta { name: Some(names.1.to_owned()), ..Default::default() },
            webhooks: Some(validating),
        },
    )
}
