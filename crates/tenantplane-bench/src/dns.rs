//! `tenantplane-bench dns`: queries per second and p99 latency of the tenant DNS
//! server (in process on 127.0.0.1, fed by a real host API server holding N
//! Services of the tenant), against the same query load on a plain UDP responder
//! that answers from memory, in the same run.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use kube::Client;
use serde_json::json;
use tenantplane_core::dns::DnsTenant;
use tenantplane_core::kinds::{GroupKind, Scope};
use tenantplane_core::transform::{TenantTarget, to_host};
use tenantplane_dns::{DnsSettings, Listeners, feed_index, serve, shared_index};
use tenantplane_testenv::{ApiServerOptions, TestEnv};
use tokio::net::UdpSocket;

use crate::{create_json, create_namespace, ms, percentile, progress, rate};

const NS: &str = "team-dns";
const TENANT: &str = "dev";

#[derive(clap::Args, Clone, Copy)]
pub struct DnsArgs {
    /// Tenant Services on the host (the index size).
    #[arg(long, default_value_t = 1000)]
    services: usize,
    /// Queries per side.
    #[arg(long, default_value_t = 50_000)]
    queries: usize,
    /// Queries in flight (one UDP socket each).
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
}

/// A DNS query for `name` A, id `id` (RFC 1035 wire format).
fn query(id: u16, name: &str) -> Vec<u8> {
    let mut q = Vec::with_capacity(64);
    q.extend_from_slice(&id.to_be_bytes());
    q.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.split('.').filter(|l| !l.is_empty()) {
        q.push(u8::try_from(label.len()).unwrap_or(63));
        q.extend_from_slice(label.as_bytes());
    }
    q.extend_from_slice(&[0, 0, 1, 0, 1]);
    q
}

/// The baseline: answers every query with its own bytes as a response with one
/// A record, from memory (no parsing beyond the header).
async fn plain_responder(socket: UdpSocket) {
    let mut buf = vec![0u8; 1500];
    loop {
        let Ok((len, peer)) = socket.recv_from(&mut buf).await else {
            return;
        };
        let mut reply = buf.get(..len).unwrap_or_default().to_vec();
        if reply.len() < 12 {
            continue;
        }
        reply[2] |= 0x84; // QR + AA
        reply[7] = 1; // ANCOUNT 1
        reply.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 5, 0, 4, 10, 0, 0, 1]);
        let _ = socket.send_to(&reply, peer).await;
    }
}

/// Sends `names` round-robin with `concurrency` sockets; returns each latency and
/// the wall time. A reply with another id or no answer counts as an error.
async fn load(
    server: SocketAddr,
    names: Arc<Vec<String>>,
    queries: usize,
    concurrency: usize,
) -> Result<(Vec<Duration>, Duration)> {
    let start = Instant::now();
    let mut tasks = Vec::new();
    for worker in 0..concurrency {
        let names = Arc::clone(&names);
        tasks.push(tokio::spawn(async move {
            let socket = UdpSocket::bind("127.0.0.1:0").await?;
            socket.connect(server).await?;
            let mut latencies = Vec::new();
            let mut buf = vec![0u8; 1500];
            let mut i = worker;
            while i < queries {
                let id = u16::try_from(i % 65_536).unwrap_or(0);
                let q = query(id, &names[i % names.len()]);
                let sent = Instant::now();
                socket.send(&q).await?;
                let len = tokio::time::timeout(Duration::from_secs(2), socket.recv(&mut buf))
                    .await
                    .context("no answer within 2 s")??;
                latencies.push(sent.elapsed());
                if len < 12 || buf[..2] != id.to_be_bytes() || buf[7] == 0 {
                    bail!("bad answer for {}", names[i % names.len()]);
                }
                i += concurrency;
            }
            anyhow::Ok(latencies)
        }));
    }
    let mut all = Vec::with_capacity(queries);
    for task in tasks {
        all.extend(task.await??);
    }
    let wall = start.elapsed();
    all.sort();
    Ok((all, wall))
}

fn report(side: &str, latencies: &[Duration], wall: Duration) -> (f64, Duration) {
    let qps = rate(latencies.len(), wall);
    let p99 = percentile(latencies, 99.0);
    println!(
        "{side:<16} {qps:>10.0} q/s   p50 {:>7.3} ms   p99 {:>7.3} ms",
        ms(percentile(latencies, 50.0)),
        ms(p99)
    );
    (qps, p99)
}

pub async fn dns_benchmark(args: DnsArgs) -> Result<()> {
    progress("starting etcd and the host API server");
    let env = TestEnv::start()
        .await
        .context("start etcd (set KUBEBUILDER_ASSETS)")?;
    let server = env
        .start_apiserver_with(ApiServerOptions::stock("host"))
        .await?;
    let host: Client = server.client().await?;
    create_namespace(&host, NS).await?;
    progress(&format!(
        "creating {} tenant Services on the host",
        args.services
    ));
    let target = TenantTarget::new(TENANT, NS)?;
    let mut names = Vec::with_capacity(args.services);
    for i in 0..args.services {
        let name = format!("svc-{i}");
        let tenant = json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"ports": [{"name": "http", "port": 80}]}});
        let (_, host_copy) = to_host(
            &target,
            &GroupKind::new("", "Service"),
            Scope::Namespaced,
            &tenant,
        )?;
        create_json(&host, host_copy).await?;
        names.push(format!("{name}.default.svc.cluster.local."));
    }

    let index = shared_index(DnsTenant {
        host_namespace: NS.into(),
        tenant: TENANT.into(),
    });
    let listeners = Listeners::bind("127.0.0.1:0".parse()?).await?;
    let addr = listeners.local_addr().context("no local address")?;
    let settings = DnsSettings {
        cluster_domain: "cluster.local".into(),
        // Every benchmark name is a cluster name: nothing is forwarded.
        upstream: "127.0.0.1:9".parse()?,
    };
    let feeder = tokio::spawn(feed_index(host.clone(), index.clone()));
    let dns = tokio::spawn(serve(index.clone(), settings, listeners));
    progress("waiting for the server to index every Service");
    let deadline = Instant::now() + Duration::from_secs(120);
    while index.read().map(|i| i.service_count()).unwrap_or(0) < args.services {
        if Instant::now() > deadline {
            bail!(
                "the DNS server did not index {} Services in time",
                args.services
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let baseline_socket = UdpSocket::bind("127.0.0.1:0").await?;
    let baseline_addr = baseline_socket.local_addr()?;
    let baseline = tokio::spawn(plain_responder(baseline_socket));
    let names = Arc::new(names);
    progress(&format!(
        "{} A queries per side, {} in flight",
        args.queries, args.concurrency
    ));
    let (b_lat, b_wall) = load(
        baseline_addr,
        Arc::clone(&names),
        args.queries,
        args.concurrency,
    )
    .await?;
    let (t_lat, t_wall) = load(addr, names, args.queries, args.concurrency).await?;
    println!(
        "\n{} Services, {} queries, concurrency {}",
        args.services, args.queries, args.concurrency
    );
    let (b_qps, b_p99) = report("plain responder", &b_lat, b_wall);
    let (t_qps, t_p99) = report("tenantplane dns", &t_lat, t_wall);
    println!(
        "ratio (tenantplane / baseline): throughput {:.2}x, p99 {:.2}x",
        t_qps / b_qps.max(1e-9),
        ms(t_p99) / ms(b_p99).max(1e-9)
    );
    baseline.abort();
    dns.abort();
    feeder.abort();
    Ok(())
}
