//! Services on both sides: the tenant Service carries the address its host copy
//! was given ([`address`]), and sees its real Endpoints ([`endpoints`]).

pub mod address;
pub mod endpoint_slice;
pub mod endpoints;
pub mod env;
pub mod ingress;
pub mod ingress_refs;
