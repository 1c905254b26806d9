//! The NDJSON codec and frame parsing: any bytes, in any chunking, never
//! panic, never buffer past the line limit, and every frame that decodes
//! re-encodes to one line that decodes to the same frame.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zotbox_protocol::{Decoder, ExtensionFrame, Frame, HostFrame, encode_to_vec};

fn check<F: Frame + PartialEq + std::fmt::Debug>(data: &[u8], chunk: usize) {
    let mut decoder = Decoder::new(256);
    for piece in data.chunks(chunk.max(1)) {
        decoder.push(piece);
        while let Some(item) = decoder.next_frame::<F>() {
            if let Ok(frame) = item {
                let line = encode_to_vec(&frame).expect("frames always encode");
                assert_eq!(line.iter().filter(|&&b| b == b'\n').count(), 1);
                let mut again = Decoder::new(usize::MAX);
                again.push(&line);
                match again.next_frame::<F>() {
                    Some(Ok(back)) => assert_eq!(back, frame),
                    other => panic!("re-encoded frame did not decode: {other:?}"),
                }
            }
        }
    }
    let _ = decoder.finish::<F>();
}

fuzz_target!(|data: &[u8]| {
    let chunk = data.first().map_or(1, |&b| usize::from(b) + 1);
    check::<ExtensionFrame>(data, chunk);
    check::<HostFrame>(data, chunk);
});
