//! tenantplane's validating admission webhook for its own resources.
//!
//! [`review::review`] answers an `admission.k8s.io/v1` AdmissionReview with the rules
//! of [`tenantplane_core::validation`]; [`server::serve`] serves it over HTTPS
//! (rustls with ring) at `POST /validate`, with `GET /healthz`;
//! [`config::webhook_configuration`] renders the ValidatingWebhookConfiguration that
//! sends TenantClusters, IsolationProfiles and SyncPolicies (and nothing else) to it.
//!
//! With a client, [`server::router_with_tenancy`] also serves the namespace-tenant
//! admission: `POST /namespaces` ([`namespaces`]: namespace creations by Tenant
//! owners join their tenant within its namespace quota, race-free; nobody but an
//! admin moves a namespace between tenants) and `POST /tenant-resources`
//! ([`tenant_resources`]: cordon, allowed classes and node selectors inside tenant
//! namespaces), both rendered by [`config::namespace_webhook_configuration`].
//! The Tenant `preventDeletion` rule is part of `POST /validate`.

mod answer;
pub mod config;
pub mod from_host;
pub mod ingress_claims;
pub mod namespaces;
pub mod review;
pub mod rules;
pub mod server;
pub mod tenant_resources;
pub mod tls;

pub use config::{WebhookClient, namespace_webhook_configuration, webhook_configuration};
pub use server::{
    router, router_with_client, router_with_rules, router_with_tenancy, serve, serve_router,
};
pub use tenantplane_core::tenant_admission::Admins;
pub use tls::{tls_config, tls_config_from_files};

/// Why the webhook server could not start (its certificate or TLS configuration).
pub use tenantplane_https::TlsError as Error;
