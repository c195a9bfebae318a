//! Incremental decoders for the codecs Spark compresses event logs with
//! (`spark.eventLog.compression.codec`, default `zstd` since Spark 3.0):
//!
//! | codec | file suffix | stream format (Spark's `CompressionCodec`) |
//! |---|---|---|
//! | zstd | `.zstd` | zstd frames (one or more; `ZstdOutputStream` flushes blocks) |
//! | lz4 | `.lz4` | lz4-java `LZ4BlockOutputStream`: blocks of `"LZ4Block"`, token, compressed and decompressed length (LE), xxhash32 checksum, data; an empty raw block ends a stream |
//! | snappy | `.snappy` | xerial `SnappyOutputStream`: `\x82SNAPPY\0`, version, compatible version, then chunks of a big-endian length and a raw snappy block |
//! | none | (no suffix) | plain text |
//!
//! A decoder is fed the compressed bytes as a file grows and returns what it
//! can decode; an unfinished block or frame waits for more bytes, so a live
//! log is followed without re-reading it. Memory is bounded by one block
//! (lz4, snappy: 32 KiB by default in Spark; zstd: its window).

use std::fmt;

/// A codec, from an event-log file name's suffix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Codec {
    None,
    Zstd,
    Lz4,
    Snappy,
}

impl Codec {
    /// The codec of a file named `events_1_<app>.zstd`, `local-1.lz4.inprogress`, ...;
    /// `Err` names a codec weir cannot read (`lzf`).
    pub fn from_file_name(name: &str) -> Result<Codec, String> {
        let name = name.strip_suffix(".inprogress").unwrap_or(name);
        let ext = name.rsplit_once('.').map(|(_, e)| e).unwrap_or("");
        match ext {
            "zstd" | "zst" => Ok(Codec::Zstd),
            "lz4" => Ok(Codec::Lz4),
            "snappy" => Ok(Codec::Snappy),
            "lzf" => Err(
                "lzf-compressed event logs are not supported; set spark.eventLog.compression.codec to zstd, lz4 or snappy"
                    .to_string(),
            ),
            _ => Ok(Codec::None),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Codec::None => "none",
            Codec::Zstd => "zstd",
            Codec::Lz4 => "lz4",
            Codec::Snappy => "snappy",
        }
    }
}

impl fmt::Display for Codec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Corrupt input: the decoder cannot go on (the bytes after it are not read).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodecError {
    /// Offset in the compressed file where the bad block or frame starts.
    pub at: u64,
    pub message: String,
}

impl fmt::Display for CodecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at byte {}: {}", self.at, self.message)
    }
}

const LZ4_MAGIC: &[u8; 8] = b"LZ4Block";
/// Header: magic, token, compressed length, decompressed length, checksum.
const LZ4_HEADER: usize = 8 + 1 + 4 + 4 + 4;
/// lz4-java's default seed for the block checksum.
const LZ4_SEED: u32 = 0x9747_b28c;
const SNAPPY_MAGIC: &[u8; 8] = b"\x82SNAPPY\x00";
/// A block larger than this is treated as corruption, not as a reason to buffer.
const MAX_BLOCK: usize = 64 << 20;

/// Decodes one compressed file incrementally.
pub struct Decoder {
    codec: Codec,
    /// Compressed bytes received but not decoded yet (lz4, snappy: an unfinished block).
    held: Vec<u8>,
    /// Compressed bytes consumed so far (for error positions).
    consumed: u64,
    zstd: Option<zstd::stream::raw::Decoder<'static>>,
    /// zstd: a frame is open (started, not finished).
    in_frame: bool,
    /// snappy: the stream header was read.
    snappy_header: bool,
    failed: Option<CodecError>,
}

impl fmt::Debug for Decoder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Decoder")
            .field("codec", &self.codec)
            .field("held", &self.held.len())
            .field("consumed", &self.consumed)
            .field("in_frame", &self.in_frame)
            .finish()
    }
}

impl Decoder {
    pub fn new(codec: Codec) -> Result<Decoder, CodecError> {
        let zstd = match codec {
            Codec::Zstd => Some(zstd::stream::raw::Decoder::new().map_err(|e| CodecError {
                at: 0,
                message: format!("cannot create a zstd decoder: {e}"),
            })?),
            _ => None,
        };
        Ok(Decoder {
            codec,
            held: Vec::new(),
            consumed: 0,
            zstd,
            in_frame: false,
            snappy_header: false,
            failed: None,
        })
    }

    pub fn codec(&self) -> Codec {
        self.codec
    }

    /// Whether the input so far ends inside a block or frame (more bytes are needed).
    pub fn incomplete(&self) -> bool {
        !self.held.is_empty() || self.in_frame
    }

    /// Compressed bytes held back, waiting for the rest of their block.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Decodes `input` (the next bytes of the file) and appends the text to `out`.
    /// After an error every later call returns the same error.
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(), CodecError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let result = match self.codec {
            Codec::None => {
                out.extend_from_slice(input);
                self.consumed += input.len() as u64;
                Ok(())
            }
            Codec::Zstd => self.feed_zstd(input, out),
            Codec::Lz4 => {
                self.held.extend_from_slice(input);
                self.drain_lz4(out)
            }
            Codec::Snappy => {
                self.held.extend_from_slice(input);
                self.drain_snappy(out)
            }
        };
        if let Err(e) = &result {
            self.failed = Some(e.clone());
        }
        result
    }

    fn feed_zstd(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(), CodecError> {
        use zstd::stream::raw::{InBuffer, Operation, OutBuffer};
        let Some(dec) = self.zstd.as_mut() else {
            return Ok(());
        };
        let mut src = InBuffer::around(input);
        let mut chunk = vec![0u8; 128 * 1024];
        loop {
            let before = src.pos();
            let mut dst = OutBuffer::around(&mut chunk[..]);
            let hint = dec.run(&mut src, &mut dst).map_err(|e| CodecError {
                at: self.consumed + before as u64,
                message: format!("corrupt zstd data: {e}"),
            })?;
            let produced = dst.pos();
            out.extend_from_slice(&chunk[..produced]);
            // `hint` 0: a frame is complete and fully flushed.
            if hint == 0 {
                self.in_frame = false;
            } else if src.pos() > before || produced > 0 {
                self.in_frame = true;
            }
            let progressed = src.pos() > before || produced > 0;
            if src.pos() >= input.len() && produced < chunk.len() {
                break;
            }
            if !progressed {
                break;
            }
        }
        self.consumed += src.pos() as u64;
        Ok(())
    }

    fn drain_lz4(&mut self, out: &mut Vec<u8>) -> Result<(), CodecError> {
        let mut pos = 0usize;
        let result = loop {
            let rest = &self.held[pos..];
            if rest.len() < LZ4_HEADER {
                if !LZ4_MAGIC.starts_with(&rest[..rest.len().min(8)]) {
                    break Err(self.lz4_error(pos, "not an lz4-java block (no LZ4Block magic)"));
                }
                break Ok(());
            }
            if &rest[..8] != LZ4_MAGIC {
                break Err(self.lz4_error(pos, "not an lz4-java block (no LZ4Block magic)"));
            }
            let token = rest[8];
            let le =
                |i: usize| i32::from_le_bytes([rest[i], rest[i + 1], rest[i + 2], rest[i + 3]]);
            let (clen, dlen, checksum) = (le(9), le(13), le(17));
            let (Ok(clen), Ok(dlen)) = (usize::try_from(clen), usize::try_from(dlen)) else {
                break Err(self.lz4_error(pos, "negative block length"));
            };
            if clen > MAX_BLOCK || dlen > MAX_BLOCK {
                break Err(self.lz4_error(pos, "block length out of range"));
            }
            if rest.len() < LZ4_HEADER + clen {
                break Ok(());
            }
            let data = &rest[LZ4_HEADER..LZ4_HEADER + clen];
            let method = token & 0xf0;
            let block = match method {
                // Raw (stored) block; an empty one ends a stream.
                0x10 => data.to_vec(),
                0x20 => match lz4_flex::block::decompress(data, dlen) {
                    Ok(b) => b,
                    Err(e) => break Err(self.lz4_error(pos, &format!("corrupt lz4 block: {e}"))),
                },
                other => {
                    break Err(
                        self.lz4_error(pos, &format!("unknown lz4-java block method {other:#x}"))
                    );
                }
            };
            if block.len() != dlen {
                break Err(self.lz4_error(pos, "block decompressed to the wrong length"));
            }
            if dlen > 0 {
                let sum = twox_hash::XxHash32::oneshot(LZ4_SEED, &block) & 0x0fff_ffff;
                if sum as i32 != checksum {
                    break Err(self.lz4_error(pos, "block checksum mismatch"));
                }
            }
            out.extend_from_slice(&block);
            pos += LZ4_HEADER + clen;
        };
        self.consumed += pos as u64;
        self.held.drain(..pos);
        result
    }

    fn lz4_error(&self, pos: usize, message: &str) -> CodecError {
        CodecError {
            at: self.consumed + pos as u64,
            message: message.to_string(),
        }
    }

    fn drain_snappy(&mut self, out: &mut Vec<u8>) -> Result<(), CodecError> {
        let mut pos = 0usize;
        let mut decoder = snap::raw::Decoder::new();
        let result = loop {
            let rest = &self.held[pos..];
            // A stream header (also between concatenated streams).
            if rest.len() >= 8 && &rest[..8] == SNAPPY_MAGIC {
                if rest.len() < 16 {
                    break Ok(());
                }
                self.snappy_header = true;
                pos += 16;
                continue;
            }
            if !self.snappy_header {
                if rest.len() < 8 && SNAPPY_MAGIC.starts_with(rest) {
                    break Ok(());
                }
                break Err(CodecError {
                    at: self.consumed + pos as u64,
                    message: "not a snappy stream (no \\x82SNAPPY header)".into(),
                });
            }
            if rest.len() < 4 {
                break Ok(());
            }
            let len = i32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]);
            let Some(len) = usize::try_from(len).ok().filter(|l| *l <= MAX_BLOCK) else {
                break Err(CodecError {
                    at: self.consumed + pos as u64,
                    message: format!("snappy chunk length {len} out of range"),
                });
            };
            if rest.len() < 4 + len {
                break Ok(());
            }
            match decoder.decompress_vec(&rest[4..4 + len]) {
                Ok(b) => out.extend_from_slice(&b),
                Err(e) => {
                    break Err(CodecError {
                        at: self.consumed + pos as u64,
                        message: format!("corrupt snappy chunk: {e}"),
                    });
                }
            }
            pos += 4 + len;
        };
        self.consumed += pos as u64;
        self.held.drain(..pos);
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_in_pieces(codec: Codec, bytes: &[u8], piece: usize) -> (Vec<u8>, Decoder) {
        let mut d = Decoder::new(codec).unwrap();
        let mut out = Vec::new();
        for chunk in bytes.chunks(piece) {
            d.feed(chunk, &mut out).unwrap();
        }
        (out, d)
    }

    fn text() -> Vec<u8> {
        (0..2000)
            .map(|i| format!("{{\"Event\":\"line\",\"n\":{i}}}\n"))
            .collect::<String>()
            .into_bytes()
    }

    #[test]
    fn zstd_multi_frame_in_any_pieces() {
        let t = text();
        let (a, b) = t.split_at(t.len() / 3);
        let mut bytes = zstd::bulk::compress(a, 1).unwrap();
        bytes.extend(zstd::bulk::compress(b, 3).unwrap());
        for piece in [1, 7, 4096, bytes.len()] {
            let (out, d) = decode_in_pieces(Codec::Zstd, &bytes, piece);
            assert_eq!(out, t, "piece {piece}");
            assert!(!d.incomplete());
        }
        // A truncated frame waits for more bytes.
        let (out, d) = decode_in_pieces(Codec::Zstd, &bytes[..bytes.len() - 5], 1000);
        assert!(d.incomplete());
        assert!(out.len() < t.len());
    }

    fn lz4_java(blocks: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for b in blocks {
            let c = lz4_flex::block::compress(b);
            out.extend_from_slice(LZ4_MAGIC);
            out.push(0x20 | 0x0a);
            out.extend_from_slice(&(c.len() as i32).to_le_bytes());
            out.extend_from_slice(&(b.len() as i32).to_le_bytes());
            let sum = twox_hash::XxHash32::oneshot(LZ4_SEED, b) & 0x0fff_ffff;
            out.extend_from_slice(&(sum as i32).to_le_bytes());
            out.extend_from_slice(&c);
        }
        out.extend_from_slice(LZ4_MAGIC);
        out.push(0x10);
        out.extend_from_slice(&[0; 12]);
        out
    }

    #[test]
    fn lz4_java_blocks_in_any_pieces_and_bad_checksum() {
        let t = text();
        let bytes = lz4_java(&t.chunks(32 * 1024).collect::<Vec<_>>());
        for piece in [1, 13, 5000, bytes.len()] {
            let (out, d) = decode_in_pieces(Codec::Lz4, &bytes, piece);
            assert_eq!(out, t, "piece {piece}");
            assert!(!d.incomplete());
        }
        let mut bad = bytes.clone();
        bad[17] ^= 1;
        let mut d = Decoder::new(Codec::Lz4).unwrap();
        let e = d.feed(&bad, &mut Vec::new()).unwrap_err();
        assert!(e.message.contains("checksum"), "{e}");
        assert_eq!(e.at, 0);
    }

    #[test]
    fn xerial_snappy_in_any_pieces() {
        let t = text();
        let mut bytes = SNAPPY_MAGIC.to_vec();
        bytes.extend_from_slice(&1i32.to_be_bytes());
        bytes.extend_from_slice(&1i32.to_be_bytes());
        let mut enc = snap::raw::Encoder::new();
        for chunk in t.chunks(32 * 1024) {
            let c = enc.compress_vec(chunk).unwrap();
            bytes.extend_from_slice(&(c.len() as i32).to_be_bytes());
            bytes.extend_from_slice(&c);
        }
        for piece in [1, 9, 3000, bytes.len()] {
            let (out, d) = decode_in_pieces(Codec::Snappy, &bytes, piece);
            assert_eq!(out, t, "piece {piece}");
            assert!(!d.incomplete());
        }
        let mut d = Decoder::new(Codec::Snappy).unwrap();
        assert!(d.feed(b"not snappy at all", &mut Vec::new()).is_err());
    }

    #[test]
    fn codec_from_names() {
        assert_eq!(
            Codec::from_file_name("events_1_local-1.zstd"),
            Ok(Codec::Zstd)
        );
        assert_eq!(
            Codec::from_file_name("local-1.lz4.inprogress"),
            Ok(Codec::Lz4)
        );
        assert_eq!(
            Codec::from_file_name("events_2_app-1.snappy"),
            Ok(Codec::Snappy)
        );
        assert_eq!(
            Codec::from_file_name("local-1796033672291"),
            Ok(Codec::None)
        );
        assert_eq!(Codec::from_file_name("local-1.inprogress"), Ok(Codec::None));
        assert!(Codec::from_file_name("local-1.lzf").is_err());
    }
}
