//! The hickory request handler: cluster names from the index, the rest upstream.

use std::net::SocketAddr;
use std::time::Duration;

use hickory_proto::op::{Metadata, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA, CNAME, SRV};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use hickory_server::Server;
use hickory_server::net::runtime::Time;
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::zone_handler::MessageResponseBuilder;
use tenantplane_core::dns::{self, Answer, QueryType, TTL_SECONDS};
use tokio::net::{TcpListener, UdpSocket};

use crate::{DnsError, DnsSettings, SharedIndex, forward};

/// How long an idle TCP client is kept.
const TCP_TIMEOUT: Duration = Duration::from_secs(10);

/// Answers one tenant's names.
pub struct TenantDnsHandler {
    index: SharedIndex,
    settings: DnsSettings,
}

impl TenantDnsHandler {
    pub fn new(index: SharedIndex, mut settings: DnsSettings) -> Self {
        settings.cluster_domain = dns::normalize(&settings.cluster_domain);
        Self { index, settings }
    }

    /// The answer from the index; a poisoned lock (a panicked writer) still holds
    /// the last consistent records, so reads go on.
    fn lookup(&self, qname: &str, qtype: QueryType) -> Answer {
        let index = match self.index.read() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        dns::answer(&index, qname, qtype, &self.settings.cluster_domain)
    }
}

fn query_type(rtype: RecordType) -> QueryType {
    match rtype {
        RecordType::A => QueryType::A,
        RecordType::AAAA => QueryType::Aaaa,
        RecordType::SRV => QueryType::Srv,
        RecordType::CNAME => QueryType::Cname,
        _ => QueryType::Other,
    }
}

/// hickory records for an answer; a target that is not a valid name is dropped
/// (it came from a tenant's `externalName`, which the API server validates anyway).
fn to_records(owner: &Name, records: &[dns::Record]) -> Vec<Record> {
    let name = |target: &str| Name::from_ascii(format!("{target}.")).ok();
    records
        .iter()
        .filter_map(|r| {
            let rdata = match r {
                dns::Record::A(ip) => RData::A(A(*ip)),
                dns::Record::Aaaa(ip) => RData::AAAA(AAAA(*ip)),
                dns::Record::Cname(target) => RData::CNAME(CNAME(name(target)?)),
                dns::Record::Srv {
                    priority,
                    weight,
                    port,
                    target,
                } => RData::SRV(SRV::new(*priority, *weight, *port, name(target)?)),
            };
            Some(Record::from_rdata(owner.clone(), TTL_SECONDS, rdata))
        })
        .collect()
}

async fn send<R: ResponseHandler>(
    request: &Request,
    mut handle: R,
    metadata: Metadata,
    answers: &[Record],
    authorities: &[Record],
    additionals: &[Record],
) -> ResponseInfo {
    let response = MessageResponseBuilder::from_message_request(request).build(
        metadata,
        answers.iter(),
        authorities.iter(),
        std::iter::empty(),
        additionals.iter(),
    );
    match handle.send_response(response).await {
        Ok(info) => info,
        Err(error) => {
            tracing::debug!(%error, "cannot send a DNS response");
            let mut failed = Metadata::response_from_request(&request.metadata);
            failed.response_code = ResponseCode::ServFail;
            hickory_proto::op::Header {
                metadata: failed,
                counts: Default::default(),
            }
            .into()
        }
    }
}

#[async_trait::async_trait]
impl RequestHandler for TenantDnsHandler {
    async fn handle_request<R: ResponseHandler, T: Time>(
        &self,
        request: &Request,
        handle: R,
    ) -> ResponseInfo {
        let mut metadata = Metadata::response_from_request(&request.metadata);
        let info = match request.request_info() {
            Ok(info) => info,
            Err(_) => {
                metadata.response_code = ResponseCode::FormErr;
                return send(request, handle, metadata, &[], &[], &[]).await;
            }
        };
        let owner: Name = info.query.name().into();
        let qname = owner.to_ascii();
        let answer = self.lookup(&qname, query_type(info.query.query_type()));
        metadata.recursion_available = true;
        match answer {
            Answer::Forward => {
                match forward::forward(
                    request.as_slice(),
                    request.metadata.id,
                    self.settings.upstream,
                )
                .await
                {
                    Ok(reply) => {
                        let mut relayed = reply.metadata;
                        relayed.id = request.metadata.id;
                        send(
                            request,
                            handle,
                            relayed,
                            &reply.answers,
                            &reply.authorities,
                            &reply.additionals,
                        )
                        .await
                    }
                    Err(error) => {
                        tracing::debug!(%error, name = %qname, "forwarding failed");
                        metadata.response_code = ResponseCode::ServFail;
                        send(request, handle, metadata, &[], &[], &[]).await
                    }
                }
            }
            Answer::NxDomain => {
                metadata.authoritative = true;
                metadata.response_code = ResponseCode::NXDomain;
                send(request, handle, metadata, &[], &[], &[]).await
            }
            Answer::Records(records) => {
                metadata.authoritative = true;
                let answers = to_records(&owner, &records);
                send(request, handle, metadata, &answers, &[], &[]).await
            }
        }
    }
}

/// The bound sockets of one server (bound before serving, so a caller can pick
/// port 0 and learn the port).
pub struct Listeners {
    pub udp: UdpSocket,
    pub tcp: TcpListener,
}

impl Listeners {
    /// Binds UDP and TCP on `addr`; with port 0, TCP takes the port UDP got.
    pub async fn bind(addr: SocketAddr) -> Result<Self, DnsError> {
        let udp = UdpSocket::bind(addr)
            .await
            .map_err(|source| DnsError::Listen { addr, source })?;
        let bound = udp
            .local_addr()
            .map_err(|source| DnsError::Listen { addr, source })?;
        let tcp = TcpListener::bind(bound)
            .await
            .map_err(|source| DnsError::Listen {
                addr: bound,
                source,
            })?;
        Ok(Self { udp, tcp })
    }

    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.udp.local_addr().ok()
    }
}

/// Serves DNS on `listeners` until the server fails.
pub async fn serve(
    index: SharedIndex,
    settings: DnsSettings,
    listeners: Listeners,
) -> Result<(), DnsError> {
    let mut server = Server::new(TenantDnsHandler::new(index, settings));
    server.register_socket(listeners.udp);
    server.register_listener(listeners.tcp, TCP_TIMEOUT, 65_535);
    server
        .block_until_done()
        .await
        .map_err(|e| DnsError::Serve(e.to_string()))
}
