#![allow(clippy::unwrap_used, clippy::expect_used)]
use super::*;
use tokio::io::DuplexStream;

#[test]
fn the_querys_ports_are_read() {
    assert_eq!(allowed_ports("").unwrap(), None);
    assert_eq!(allowed_ports("timeout=5").unwrap(), None);
    assert_eq!(
        allowed_ports("port=80&ports=8080,9090&ports=443%2C22").unwrap(),
        Some(BTreeSet::from([22, 80, 443, 8080, 9090]))
    );
    assert!(allowed_ports("port=0").is_err());
    assert!(allowed_ports("port=65536").is_err());
    assert!(allowed_ports("ports=80,x").is_err());
}

/// A session whose host is never reached (the paths under test refuse or
/// answer before any host call; a call would fail to connect).
fn start(allowed: Option<BTreeSet<u16>>) -> (DuplexStream, tokio::task::JoinHandle<()>) {
    let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
    let client = kube::Client::try_from(config).unwrap();
    let pods: Api<Pod> = Api::namespaced(client, "team-dev");
    let (ours, theirs) = tokio::io::duplex(64 * 1024);
    let (reader, writer) = tokio::io::split(theirs);
    let task = tokio::spawn(session(
        reader,
        writer,
        pods,
        "web-x-shop-x-dev".into(),
        allowed,
    ));
    (ours, task)
}

/// Reads frames until `want` of them arrived (or the connection closes).
async fn frames(conn: &mut DuplexStream, decoder: &mut Decoder, want: usize) -> Vec<Frame> {
    let mut got = Vec::new();
    let mut buf = vec![0u8; 4096];
    while got.len() < want {
        while let Some(frame) = decoder.next_frame().unwrap() {
            got.push(frame);
        }
        if got.len() >= want {
            break;
        }
        let n = tokio::time::timeout(Duration::from_secs(10), conn.read(&mut buf))
            .await
            .expect("frames within 10 s")
            .unwrap();
        if n == 0 {
            break;
        }
        decoder.feed(&buf[..n]);
    }
    got
}

#[tokio::test]
async fn a_port_the_query_did_not_request_is_refused_on_the_error_stream() {
    let (mut conn, task) = start(Some(BTreeSet::from([80])));
    let mut client = Encoder::new();
    let mut decoder = Decoder::new();
    let port = [("port", "8080"), ("requestid", "0")];
    conn.write_all(&client.syn_stream(1, FLAG_FIN, &[port[0], port[1], ("streamtype", "error")]))
        .await
        .unwrap();
    conn.write_all(&client.syn_stream(3, 0, &[port[0], port[1], ("streamtype", "data")]))
        .await
        .unwrap();
    conn.write_all(&Encoder::ping(7)).await.unwrap();
    let got = frames(&mut conn, &mut decoder, 5).await;
    let replies: Vec<u32> = got
        .iter()
        .filter_map(|f| match f {
            Frame::SynReply { stream_id, .. } => Some(*stream_id),
            _ => None,
        })
        .collect();
    assert_eq!(replies, [1, 3], "{got:?}");
    assert!(got.contains(&Frame::Ping { id: 7 }), "{got:?}");
    assert!(
        got.contains(&Frame::Data {
            stream_id: 1,
            flags: FLAG_FIN,
            data: b"unable to do port forwarding: port 8080 was not requested".to_vec(),
        }),
        "{got:?}"
    );
    assert!(
        got.contains(&Frame::Data {
            stream_id: 3,
            flags: FLAG_FIN,
            data: Vec::new(),
        }),
        "{got:?}"
    );
    drop(conn);
    task.await.unwrap();
}

#[tokio::test]
async fn the_data_stream_may_come_first() {
    let (mut conn, task) = start(Some(BTreeSet::from([80])));
    let mut client = Encoder::new();
    let mut decoder = Decoder::new();
    let headers = |kind| [("port", "81"), ("requestid", "7"), ("streamtype", kind)];
    conn.write_all(&client.syn_stream(1, 0, &headers("data")))
        .await
        .unwrap();
    conn.write_all(&client.syn_stream(3, FLAG_FIN, &headers("error")))
        .await
        .unwrap();
    let got = frames(&mut conn, &mut decoder, 4).await;
    assert!(
        got.contains(&Frame::Data {
            stream_id: 3,
            flags: FLAG_FIN,
            data: b"unable to do port forwarding: port 81 was not requested".to_vec(),
        }),
        "{got:?}"
    );
    drop(conn);
    task.await.unwrap();
}

#[tokio::test]
async fn bad_streams_are_reset_and_a_broken_frame_ends_the_session() {
    let (mut conn, task) = start(None);
    let mut client = Encoder::new();
    let mut decoder = Decoder::new();
    // No stream type; an even (server-side) id; data for a stream never opened.
    conn.write_all(&client.syn_stream(1, 0, &[("port", "80")]))
        .await
        .unwrap();
    conn.write_all(&client.syn_stream(4, 0, &[("streamtype", "data"), ("port", "80")]))
        .await
        .unwrap();
    conn.write_all(&Encoder::data(9, 0, b"x")).await.unwrap();
    let got = frames(&mut conn, &mut decoder, 3).await;
    assert_eq!(
        got,
        [
            Frame::RstStream {
                stream_id: 1,
                status: spdy::RST_PROTOCOL_ERROR
            },
            Frame::RstStream {
                stream_id: 4,
                status: spdy::RST_PROTOCOL_ERROR
            },
            Frame::RstStream {
                stream_id: 9,
                status: spdy::RST_INVALID_STREAM
            },
        ]
    );
    // Past MAX_REQUESTS half-open requests, new streams are refused.
    for i in 0..MAX_REQUESTS {
        let id = 11 + 2 * i as u32;
        let request = i.to_string();
        let headers = [
            ("streamtype", "error"),
            ("port", "80"),
            ("requestid", request.as_str()),
        ];
        conn.write_all(&client.syn_stream(id, FLAG_FIN, &headers))
            .await
            .unwrap();
    }
    let got = frames(&mut conn, &mut decoder, MAX_REQUESTS).await;
    assert!(
        got.iter().all(|f| matches!(f, Frame::SynReply { .. })),
        "{got:?}"
    );
    let last = 11 + 2 * MAX_REQUESTS as u32;
    let headers = [
        ("streamtype", "error"),
        ("port", "80"),
        ("requestid", "one more"),
    ];
    conn.write_all(&client.syn_stream(last, FLAG_FIN, &headers))
        .await
        .unwrap();
    let got = frames(&mut conn, &mut decoder, 1).await;
    assert_eq!(
        got,
        [Frame::RstStream {
            stream_id: last,
            status: spdy::RST_REFUSED_STREAM
        }]
    );
    // A frame claiming 16 MiB: GOAWAY (protocol error), then the session ends.
    conn.write_all(&[0, 0, 0, 11, 0, 0xff, 0xff, 0xff])
        .await
        .unwrap();
    let got = frames(&mut conn, &mut decoder, 2).await;
    assert_eq!(
        got,
        [Frame::GoAway {
            last_good_stream_id: last,
            status: spdy::GOAWAY_PROTOCOL_ERROR
        }]
    );
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("the session ends")
        .unwrap();
}
