//! Starting an API server from a copy of another one's storage.
//!
//! A kube-apiserver spends most of its start-up CPU on bootstrapping (RBAC roles,
//! system namespaces, priority classes), and every CRD installed while it runs makes
//! it rebuild its OpenAPI spec (measured on 1.20: about 4.5 CPU-seconds to start
//! fresh, 3.8 on storage that is already bootstrapped, and 3.7 more for tenantplane's
//! seven CRDs installed live against about 1 when they are in storage at start). So
//! the first server of a kind (same flags, same CRDs) on an etcd starts fresh and
//! has its CRDs installed; its storage is then copied, right after it is ready and
//! before anything else writes to it, to a template prefix; every later server of
//! the same kind starts on a copy of the template under its own prefix. Storage
//! stays isolated: each server has its own keys.
//!
//! The copy goes through etcd's JSON gateway (`/v3/kv/range`, `/v3/kv/txn`), read at
//! one revision, so it is what a server killed at that moment would have left.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use base64::Engine as _;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::{Error, Result};

const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Below etcd's default `--max-txn-ops` (128).
const OPS_PER_TXN: usize = 100;
/// Raw bytes per transaction: base64 makes them 4/3 larger, which stays below etcd's
/// default `--max-request-bytes` (1.5 MiB).
const BYTES_PER_TXN: usize = 700 * 1024;

/// A number unique in this process (environment and template prefixes).
pub(crate) fn next_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

fn templates() -> &'static Mutex<HashMap<String, String>> {
    static TEMPLATES: OnceLock<Mutex<HashMap<String, String>>> = OnceLock::new();
    TEMPLATES.get_or_init(|| Mutex::new(HashMap::new()))
}

/// What makes two servers' fresh storage the same: the etcd, the flags that can
/// change what a server bootstraps, and the CRDs.
pub(crate) fn template_key(
    etcd_url: &str,
    extra_args: &[String],
    crds: &[CustomResourceDefinition],
) -> Result<String> {
    let crds = serde_json::to_string(crds).map_err(|e| Error::Etcd(format!("CRDs: {e}")))?;
    Ok(format!("{etcd_url}\n{}\n{crds}", extra_args.join("\n")))
}

/// The template prefix for `key`, if a server of that kind has been started.
pub(crate) fn template_for(key: &str) -> Option<String> {
    templates().lock().ok()?.get(key).cloned()
}

/// Copies the storage under `prefix` (a ready server's, before anything else wrote
/// to it) to a new template for `key`. A server of the same kind started meanwhile
/// may have made one already: the first one stays.
pub(crate) async fn save_template(etcd_url: &str, prefix: &str, key: String) -> Result<()> {
    let template = format!("/testenv-templates/{}", next_id());
    copy_prefix(etcd_url, prefix, &template).await?;
    if let Ok(mut templates) = templates().lock() {
        templates.entry(key).or_insert(template);
    }
    Ok(())
}

/// Whether no key is under `prefix`.
pub(crate) async fn is_empty(etcd_url: &str, prefix: &str) -> Result<bool> {
    let (key, end) = range_of(prefix);
    let answer = call(
        etcd_url,
        "/v3/kv/range",
        &json!({"key": b64(&key), "range_end": b64(&end), "count_only": true}),
    )
    .await?;
    Ok(answer
        .get("count")
        .and_then(|c| {
            c.as_str()
                .and_then(|s| s.parse::<u64>().ok())
                .or(c.as_u64())
        })
        .unwrap_or(0)
        == 0)
}

/// Copies every key under `from/` to the same key under `to/`.
pub(crate) async fn copy_prefix(etcd_url: &str, from: &str, to: &str) -> Result<()> {
    let (key, end) = range_of(from);
    let answer = call(
        etcd_url,
        "/v3/kv/range",
        &json!({"key": b64(&key), "range_end": b64(&end)}),
    )
    .await?;
    let mut puts = Vec::new();
    for kv in answer
        .get("kvs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let key = unb64(kv.get("key"))?;
        let value = unb64(kv.get("value"))?;
        let Some(rest) = key.strip_prefix(from.as_bytes()) else {
            return Err(Error::Etcd(format!(
                "key {} outside {from}",
                String::from_utf8_lossy(&key)
            )));
        };
        let mut new_key = to.as_bytes().to_vec();
        new_key.extend_from_slice(rest);
        puts.push((new_key, value));
    }
    let mut batch = Vec::new();
    let mut bytes = 0;
    for (key, value) in puts {
        if batch.len() == OPS_PER_TXN
            || (bytes + key.len() + value.len() > BYTES_PER_TXN && !batch.is_empty())
        {
            put_all(etcd_url, std::mem::take(&mut batch)).await?;
            bytes = 0;
        }
        bytes += key.len() + value.len();
        batch.push(json!({"request_put": {"key": b64(&key), "value": b64(&value)}}));
    }
    if !batch.is_empty() {
        put_all(etcd_url, batch).await?;
    }
    Ok(())
}

async fn put_all(etcd_url: &str, ops: Vec<Value>) -> Result<()> {
    call(etcd_url, "/v3/kv/txn", &json!({"success": ops})).await?;
    Ok(())
}

/// The keys under `prefix/`: from `prefix/` up to `prefix0` ('0' follows '/').
fn range_of(prefix: &str) -> (Vec<u8>, Vec<u8>) {
    (
        format!("{prefix}/").into_bytes(),
        format!("{prefix}0").into_bytes(),
    )
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn unb64(value: Option<&Value>) -> Result<Vec<u8>> {
    // etcd leaves an empty value out.
    let text = value.and_then(Value::as_str).unwrap_or("");
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| Error::Etcd(format!("base64 from etcd: {e}")))
}

/// One POST to etcd's JSON gateway, over HTTP/1.0 (the answer ends with the
/// connection).
async fn call(etcd_url: &str, path: &str, body: &Value) -> Result<Value> {
    let address = etcd_url.trim_start_matches("http://");
    let body = body.to_string();
    let request = format!(
        "POST {path} HTTP/1.0\r\nHost: {address}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(address).await?;
        stream.write_all(request.as_bytes()).await?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await?;
        Ok::<_, std::io::Error>(answer)
    };
    let answer = tokio::time::timeout(CALL_TIMEOUT, exchange)
        .await
        .map_err(|_| Error::Etcd(format!("{path}: no answer within {CALL_TIMEOUT:?}")))?
        .map_err(|e| Error::Etcd(format!("{path}: {e}")))?;
    let text = String::from_utf8_lossy(&answer);
    let (head, payload) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| Error::Etcd(format!("{path}: no HTTP answer")))?;
    if !head
        .lines()
        .next()
        .is_some_and(|status| status.contains(" 200 "))
    {
        return Err(Error::Etcd(format!("{path}: {head}\n{payload}")));
    }
    serde_json::from_str(payload).map_err(|e| Error::Etcd(format!("{path}: {e}: {payload}")))
}
