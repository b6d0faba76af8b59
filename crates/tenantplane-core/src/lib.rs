//! tenantplane's pure core: everything that decides *what* a host object is, with
//! no I/O. The offline CLI and the running engine call the same functions, so a
//! prediction and the engine's action cannot drift apart.

pub mod compare;
pub mod explain;
pub mod isolation;
pub mod kinds;
pub mod metadata;
pub mod names;
pub mod naming;
pub mod plan;
pub mod pods;
pub mod provenance;
pub mod quantity;
pub mod tenancy;
pub mod transform;
pub mod validation;
pub mod versions;
