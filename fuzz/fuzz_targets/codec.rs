//! The NDJSON codec and frame parsing: any bytes, in any chunking, never
//! panic, never buffer past the line limit, and every frame that decodes
//! re-encodes to one line that decodes to the same frame. The lenient peek
//! never panics on any line, and every line that does not decode yields an
//! answer (or none) without panicking; an answer is always one line.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zotbox_protocol::{Decoder, ExtensionFrame, Frame, HostFrame, encode_to_vec, peek};

fn check<F: Frame + PartialEq + std::fmt::Debug>(data: &[u8], chunk: usize) {
    let mut decoder = Decoder::new(256);
    for piece in data.chunks(chunk.max(1)) {
        decoder.push(piece);
        while let Some(item) = decoder.next_frame::<F>() {
            match item {
                Ok(frame) => {
                    let line = encode_to_vec(&frame).expect("frames always encode");
                    assert_eq!(line.iter().filter(|&&b| b == b'\n').count(), 1);
                    let mut again = Decoder::new(usize::MAX);
                    again.push(&line);
                    match again.next_frame::<F>() {
                        Some(Ok(back)) => assert_eq!(back, frame),
                        other => panic!("re-encoded frame did not decode: {other:?}"),
                    }
                }
                Err(undecoded) => {
                    if let Some(answer) = undecoded.answer("zotbox") {
                        let line = encode_to_vec(&answer).expect("answers always encode");
                        assert_eq!(line.iter().filter(|&&b| b == b'\n').count(), 1);
                        assert_eq!(Some(undecoded.peek.id), Some(answer_id(&answer)));
                    }
                }
            }
        }
    }
    let _ = decoder.finish::<F>();
}

fn answer_id(answer: &ExtensionFrame) -> Option<String> {
    match answer {
        ExtensionFrame::EventInterceptResponse(r) => Some(r.id.clone()),
        ExtensionFrame::ToolResult(r) => Some(r.id.clone()),
        ExtensionFrame::CommandResponse(r) => Some(r.id.clone()),
        _ => None,
    }
}

fuzz_target!(|data: &[u8]| {
    let chunk = data.first().map_or(1, |&b| usize::from(b) + 1);
    // Whole input as one line, then the codec in chunks.
    let _ = peek(data);
    check::<ExtensionFrame>(data, chunk);
    check::<HostFrame>(data, chunk);
});
