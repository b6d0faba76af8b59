#![allow(clippy::unwrap_used)]
use super::*;

/// kubectl's first stream pair, as zlib (with the SPDY dictionary and
/// `Z_SYNC_FLUSH`, as Go's framer writes them) compresses it: the error stream
/// (FIN, nothing to send) then the data stream, whose header block refers back
/// into the first one.
#[rustfmt::skip]
const ERROR_SYN: [u8; 69] = [
    0x80, 0x03, 0x00, 0x01, 0x01, 0x00, 0x00, 0x3d, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x78, 0xf9, 0xe3, 0xc6, 0xa7, 0xc2, 0x02, 0x25, 0x3a, 0x48, 0xf9, 0x5b, 0x04, 0x4e,
    0xea, 0x16, 0x06, 0x16, 0x06, 0x40, 0x9a, 0xb3, 0x08, 0x12, 0x5f, 0x99, 0xa0, 0x74, 0xcc, 0x68,
    0x00, 0x4e, 0x89, 0x25, 0x45, 0xa9, 0x89, 0xb9, 0xd0, 0xc2, 0x86, 0x35, 0x15, 0x14, 0x15, 0x00,
    0x00, 0x00, 0x00, 0xff, 0xff,
];
#[rustfmt::skip]
const DATA_SYN: [u8; 30] = [
    0x80, 0x03, 0x00, 0x01, 0x00, 0x00, 0x00, 0x16, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x22, 0x53, 0x33, 0xa8, 0xa4, 0x4a, 0x04, 0x00, 0x00, 0x00, 0xff, 0xff,
];

fn pairs(list: &[(&str, &str)]) -> Headers {
    list.iter()
        .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
        .collect()
}

#[test]
fn the_dictionary_is_the_spdy3_one() {
    assert_eq!(DICTIONARY.len(), 1423);
    assert_eq!(&DICTIONARY[..11], b"\0\0\0\x07options");
    assert!(DICTIONARY.ends_with(b",enq=0."));
    // The id a zlib stream primed with it names (FDICT).
    assert_eq!(adler32(&DICTIONARY), 0xe3c6_a7c2);
    assert_eq!(adler32(b"Wikipedia"), 0x11e6_0398);
}

#[test]
fn kubectls_compressed_syn_streams_are_read_across_frames() {
    let mut decoder = Decoder::new();
    // Fed in small pieces: a frame is only returned once complete.
    let mut bytes = ERROR_SYN.to_vec();
    bytes.extend_from_slice(&DATA_SYN);
    let mut frames = Vec::new();
    for piece in bytes.chunks(7) {
        decoder.feed(piece);
        while let Some(frame) = decoder.next_frame().unwrap() {
            frames.push(frame);
        }
    }
    assert_eq!(
        frames,
        vec![
            Frame::SynStream {
                stream_id: 1,
                associated_to: 0,
                priority: 0,
                flags: FLAG_FIN,
                headers: pairs(&[
                    ("port", "8080"),
                    ("requestid", "0"),
                    ("streamtype", "error")
                ]),
            },
            Frame::SynStream {
                stream_id: 3,
                associated_to: 0,
                priority: 0,
                flags: 0,
                headers: pairs(&[("port", "8080"), ("requestid", "0"), ("streamtype", "data")]),
            },
        ]
    );
    assert_eq!(
        header(&pairs(&[("streamType", "data")]), "streamtype"),
        Some("data")
    );
}

#[test]
fn syn_replies_are_stored_blocks_and_byte_exact() {
    let mut encoder = Encoder::new();
    assert_eq!(
        encoder.syn_reply(1, 0, &[]),
        [
            0x80, 0x03, 0x00, 0x02, 0x00, 0x00, 0x00, 0x14, // control, v3, SYN_REPLY, len 20
            0x00, 0x00, 0x00, 0x01, // stream 1
            0x78, 0x01, // zlib header, no dictionary
            0x00, 0x04, 0x00, 0xfb, 0xff, // stored block, 4 bytes, not final
            0x00, 0x00, 0x00, 0x00, // no headers
            0x00, 0x00, 0x00, 0xff, 0xff, // sync flush
        ]
    );
    // The zlib header only once per connection.
    assert_eq!(
        encoder.syn_reply(3, FLAG_FIN, &[]),
        [
            0x80, 0x03, 0x00, 0x02, 0x01, 0x00, 0x00, 0x12, 0x00, 0x00, 0x00, 0x03, 0x00, 0x04,
            0x00, 0xfb, 0xff, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff,
        ]
    );
}

#[test]
fn simple_frames_are_byte_exact() {
    assert_eq!(
        Encoder::data(3, FLAG_FIN, b"hi"),
        [0, 0, 0, 3, 1, 0, 0, 2, b'h', b'i']
    );
    assert_eq!(Encoder::ping(7), [0x80, 3, 0, 6, 0, 0, 0, 4, 0, 0, 0, 7]);
    assert_eq!(
        Encoder::rst_stream(5, RST_CANCEL),
        [0x80, 3, 0, 3, 0, 0, 0, 8, 0, 0, 0, 5, 0, 0, 0, 5]
    );
    assert_eq!(
        Encoder::goaway(9, GOAWAY_PROTOCOL_ERROR),
        [0x80, 3, 0, 7, 0, 0, 0, 8, 0, 0, 0, 9, 0, 0, 0, 1]
    );
}

#[test]
fn our_frames_round_trip_through_the_decoder() {
    let mut encoder = Encoder::new();
    let mut decoder = Decoder::new();
    let headers = [("Port", "22"), ("streamtype", "data"), ("x", "a\0b")];
    let big = "v".repeat(70_000);
    for frame in [
        encoder.syn_stream(1, FLAG_FIN, &headers),
        encoder.syn_reply(1, 0, &[("big", big.as_str())]),
        Encoder::data(1, 0, b"payload"),
        Encoder::ping(2),
        Encoder::rst_stream(1, RST_CANCEL),
        Encoder::goaway(1, GOAWAY_OK),
    ] {
        decoder.feed(&frame);
    }
    let mut frames = Vec::new();
    while let Some(frame) = decoder.next_frame().unwrap() {
        frames.push(frame);
    }
    assert_eq!(frames.len(), 6);
    assert_eq!(
        frames[0],
        Frame::SynStream {
            stream_id: 1,
            associated_to: 0,
            priority: 0,
            flags: FLAG_FIN,
            headers: pairs(&[("port", "22"), ("streamtype", "data"), ("x", "a\0b")]),
        }
    );
    match &frames[1] {
        Frame::SynReply {
            stream_id: 1,
            flags: 0,
            headers,
        } => {
            assert_eq!(header(headers, "big").map(str::len), Some(70_000));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        frames[2..],
        [
            Frame::Data {
                stream_id: 1,
                flags: 0,
                data: b"payload".to_vec()
            },
            Frame::Ping { id: 2 },
            Frame::RstStream {
                stream_id: 1,
                status: RST_CANCEL
            },
            Frame::GoAway {
                last_good_stream_id: 1,
                status: GOAWAY_OK
            },
        ]
    );
}

#[test]
fn hostile_frames_are_errors_not_panics() {
    // A length beyond the limit is refused before it is buffered.
    let mut d = Decoder::new();
    d.feed(&[0, 0, 0, 1, 0, 0xff, 0xff, 0xff]);
    assert_eq!(d.next_frame(), Err(SpdyError::TooLarge(0xff_ffff)));
    // Another SPDY version.
    let mut d = Decoder::new();
    d.feed(&[0x80, 2, 0, 6, 0, 0, 0, 4, 0, 0, 0, 1]);
    assert_eq!(d.next_frame(), Err(SpdyError::Version(2)));
    // Control frames too short for their fields.
    for kind in [
        TYPE_SYN_STREAM,
        TYPE_SYN_REPLY,
        TYPE_RST_STREAM,
        TYPE_PING,
        TYPE_GOAWAY,
        TYPE_HEADERS,
        TYPE_WINDOW_UPDATE,
    ] {
        let mut d = Decoder::new();
        let [hi, lo] = kind.to_be_bytes();
        d.feed(&[0x80, 3, hi, lo, 0, 0, 0, 2, 0, 0]);
        assert!(
            matches!(d.next_frame(), Err(SpdyError::Malformed(_))),
            "{kind}"
        );
    }
    // An unknown control type is passed on (and ignored by the session).
    let mut d = Decoder::new();
    d.feed(&[0x80, 3, 0, 42, 0, 0, 0, 1, 9]);
    assert_eq!(d.next_frame(), Ok(Some(Frame::Unknown { kind: 42 })));
    // A header block that is not zlib, or is corrupt deflate.
    let mut d = Decoder::new();
    d.feed(&[
        0x80, 3, 0, 1, 0, 0, 0, 14, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4,
    ]);
    assert!(matches!(d.next_frame(), Err(SpdyError::HeaderBlock(_))));
    let mut d = Decoder::new();
    d.feed(&[
        0x80, 3, 0, 1, 0, 0, 0, 16, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0x78, 0x01, 0xff, 0xff, 0xff,
        0xff,
    ]);
    assert!(matches!(d.next_frame(), Err(SpdyError::HeaderBlock(_))));
    // A zlib stream naming another dictionary.
    let mut d = Decoder::new();
    d.feed(&[
        0x80, 3, 0, 1, 0, 0, 0, 16, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0x78, 0xbb, 0, 0, 0, 1,
    ]);
    assert!(matches!(d.next_frame(), Err(SpdyError::HeaderBlock(_))));
    // Header blocks lying about their sizes.
    assert!(parse_header_block(&[0, 0, 0]).is_err());
    assert!(parse_header_block(&[0xff, 0xff, 0xff, 0xff]).is_err());
    assert!(parse_header_block(&[0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, b'a']).is_err());
    assert!(parse_header_block(&[0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0]).is_err());
    assert!(parse_header_block(&[0, 0, 0, 1, 0, 0, 0, 1, 0xff, 0, 0, 0, 0]).is_err());
    // A decompression bomb: a header block inflating past the limit.
    let mut encoder = Encoder::new();
    let huge = "x".repeat(MAX_HEADER_BLOCK + 1);
    let mut d = Decoder::new();
    d.feed(&encoder.syn_stream(1, 0, &[("a", huge.as_str())]));
    assert!(matches!(d.next_frame(), Err(SpdyError::HeaderBlock(_))));
    // A partial frame waits for more.
    let mut d = Decoder::new();
    d.feed(&[0, 0, 0, 1, 0, 0, 0, 5, 1, 2]);
    assert_eq!(d.next_frame(), Ok(None));
}
