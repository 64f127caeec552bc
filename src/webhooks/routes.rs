//! The one table of webhook routes. The HTTP router and the webhook configuration manifests are both generated from
//! it, so a webhook can never be registered at a path the server does not serve.

use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations, ServiceReference,
    ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
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

/// One admission webhook.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdmissionRoute {
    /// Defaulting or validation of a pool kind; it fails closed.
    Pool { kind: PoolKind, purpose: Purpose },
    /// Warnings on a new IPAddressClaim of one of our pool kinds (docs/compatibility.md D17). It refuses nothing and
    /// fails open, so that it can never stand between CAPV, CAPM3 or `clusterctl move` and their claims.
    ClaimWarnings,
}

/// The CEL condition that sends the API server's calls for claims only when they name one of our pool kinds: the
/// claims of other IPAM providers never reach us.
pub fn claim_of_our_pools_expression() -> String {
    let kinds: Vec<String> = PoolKind::ALL.iter().map(|k| format!("'{}'", k.kind())).collect();
    format!(
        "has(object.spec) && has(object.spec.poolRef) && has(object.spec.poolRef.apiGroup) && \
         object.spec.poolRef.apiGroup == '{GROUP}' && has(object.spec.poolRef.kind) && \
         object.spec.poolRef.kind in [{}]",
        kinds.join(", ")
    )
}

/// How long the API server waits for the claim warnings before it admits the claim without them.
const CLAIM_WARNINGS_TIMEOUT_SECONDS: i32 = 5;

impl AdmissionRoute {
    /// The controller-runtime style path, e.g. `/validate-ipam-cluster-x-k8s-io-v1alpha2-inclusterippool`; the claim
    /// warnings, for every claim version, at `/validate-ipam-cluster-x-k8s-io-ipaddressclaim`.
    pub fn path(&self) -> String {
        let group = GROUP.replace('.', "-");
        match self {
            AdmissionRoute::Pool { kind, purpose } => {
                let verb = match purpose {
                    Purpose::Default => "mutate",
                    Purpose::Validate => "validate",
                };
                format!("/{verb}-{group}-{POOL_VERSION}-{}", kind.kind().to_ascii_lowercase())
            }
            AdmissionRoute::ClaimWarnings => format!("/validate-{group}-ipaddressclaim"),
        }
    }

    /// The webhook's name in its configuration, e.g. `validation.inclusterippool.ipam.cluster.x-k8s.io`.
    pub fn name(&self) -> String {
        match self {
            AdmissionRoute::Pool { kind, purpose } => {
                let prefix = match purpose {
                    Purpose::Default => "default",
                    Purpose::Validate => "validation",
                };
                format!("{prefix}.{}.{GROUP}", kind.kind().to_ascii_lowercase())
            }
            AdmissionRoute::ClaimWarnings => format!("warnings.ipaddressclaim.{GROUP}"),
        }
    }

    pub fn purpose(&self) -> Purpose {
        match self {
            AdmissionRoute::Pool { purpose, .. } => *purpose,
            AdmissionRoute::ClaimWarnings => Purpose::Validate,
        }
    }

    pub fn operations(&self) -> Vec<String> {
        let ops: &[&str] = match self {
            AdmissionRoute::Pool { purpose: Purpose::Default, .. } => &["CREATE", "UPDATE"],
            AdmissionRoute::Pool { purpose: Purpose::Validate, .. } => &["CREATE", "UPDATE", "DELETE"],
            AdmissionRoute::ClaimWarnings => &["CREATE"],
        };
        ops.iter().map(|s| (*s).to_owned()).collect()
    }

    fn rule(&self) -> RuleWithOperations {
        let (version, resource) = match self {
            AdmissionRoute::Pool { kind, .. } => (POOL_VERSION, kind.plural()),
            // Every served claim version as it comes: the API server need not convert it (through Cluster API's
            // conversion webhook) to reach us.
            AdmissionRoute::ClaimWarnings => ("*", "ipaddressclaims".to_owned()),
        };
        RuleWithOperations {
            api_groups: Some(vec![GROUP.to_owned()]),
            api_versions: Some(vec![version.to_owned()]),
            operations: Some(self.operations()),
            resources: Some(vec![resource]),
            scope: None,
        }
    }

    fn failure_policy(&self) -> String {
        match self {
            AdmissionRoute::Pool { .. } => "Fail".to_owned(),
            AdmissionRoute::ClaimWarnings => "Ignore".to_owned(),
        }
    }

    fn match_conditions(&self) -> Option<Vec<MatchCondition>> {
        match self {
            AdmissionRoute::Pool { .. } => None,
            AdmissionRoute::ClaimWarnings => Some(vec![MatchCondition {
                name: "claim-of-our-pool-kinds".to_owned(),
                expression: claim_of_our_pools_expression(),
            }]),
        }
    }

    fn timeout_seconds(&self) -> Option<i32> {
        match self {
            AdmissionRoute::Pool { .. } => None,
            AdmissionRoute::ClaimWarnings => Some(CLAIM_WARNINGS_TIMEOUT_SECONDS),
        }
    }
}

/// Every admission webhook we serve: a defaulting and a validating one per pool kind, and the claim warnings.
pub fn admission_routes() -> Vec<AdmissionRoute> {
    PoolKind::ALL
        .into_iter()
        .flat_map(|kind| [Purpose::Default, Purpose::Validate].map(|purpose| AdmissionRoute::Pool { kind, purpose }))
        .chain([AdmissionRoute::ClaimWarnings])
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
        .filter(|r| r.purpose() == Purpose::Default)
        .map(|r| MutatingWebhook {
            admission_review_versions: vec!["v1".to_owned(), "v1beta1".to_owned()],
            client_config: endpoint.client_config(&r.path(), ca_bundle),
            failure_policy: Some(r.failure_policy()),
            match_conditions: r.match_conditions(),
            match_policy: Some("Equivalent".to_owned()),
            name: r.name(),
            rules: Some(vec![r.rule()]),
            side_effects: "None".to_owned(),
            timeout_seconds: r.timeout_seconds(),
            ..Default::default()
        })
        .collect();
    let validating = routes
        .iter()
        .filter(|r| r.purpose() == Purpose::Validate)
        .map(|r| ValidatingWebhook {
            admission_review_versions: vec!["v1".to_owned(), "v1beta1".to_owned()],
            client_config: endpoint.client_config(&r.path(), ca_bundle),
            failure_policy: Some(r.failure_policy()),
            match_conditions: r.match_conditions(),
            match_policy: Some("Equivalent".to_owned()),
            name: r.name(),
            rules: Some(vec![r.rule()]),
            side_effects: "None".to_owned(),
            timeout_seconds: r.timeout_seconds(),
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
