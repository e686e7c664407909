//! "Is this already compressed?" from a file's first bytes (issue 31, point 3): JPEG, WebP,
//! AVIF/HEIF, MP4/MOV, WebM/Matroska, MP3, Ogg, FLAC, ZIP and the formats made of it (JAR,
//! DOCX/XLSX/PPTX, EPUB), gzip, xz, zstd, bzip2, 7z, RAR. Such a file is stored raw without
//! a trial compression (not even the heuristic's confirming lz4 pass), unless compression
//! is forced. The magic numbers are the `infer` crate's (kept up to date there; a
//! hand-written table here would drift).
//!
//! Not PNG and GIF, though their payloads are compressed: measured on the mixed corpus,
//! zstd:3 takes 21-28 % off its large PNGs (zlib at a low level, or unfiltered) and 7 % off
//! a large GIF (LZW), so trying pays there (`*.png,*.gif=none` in `rules` skips them).

/// The media type of `head` (a file's first bytes) when it names an already-compressed
/// format; `None` for anything else, including formats that are often stored uncompressed
/// inside (TIFF, BMP, WAV, tar, PDF).
pub fn already_compressed(head: &[u8]) -> Option<&'static str> {
    let t = infer::get(head)?;
    COMPRESSED.contains(&t.mime_type()).then(|| t.mime_type())
}

/// Media types whose payload is compressed by the format itself.
const COMPRESSED: &[&str] = &[
    "image/jpeg",
    "image/webp",
    "image/avif",
    "image/heif",
    "video/mp4",
    "video/quicktime",
    "video/webm",
    "video/x-matroska",
    "audio/mpeg",
    "audio/ogg",
    "audio/x-flac",
    "application/zip",
    "application/java-archive",
    "application/epub+zip",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    "application/gzip",
    "application/x-xz",
    "application/zstd",
    "application/x-bzip2",
    "application/x-7z-compressed",
    "application/vnd.rar",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compressed_formats_are_told_by_their_first_bytes_and_others_are_not() {
        let mut gz = Vec::new();
        {
            use std::io::Write;
            let mut e = libdeflater::Compressor::new(libdeflater::CompressionLvl::default());
            let mut out = vec![0u8; e.gzip_compress_bound(100)];
            let n = e.gzip_compress(&[b'a'; 100], &mut out).unwrap();
            gz.write_all(&out[..n]).unwrap();
        }
        let zst = zstd::encode_all(&b"hello hello hello"[..], 3).unwrap();
        let cases: [(&[u8], Option<&str>); 10] = [
            (
                &[0xFF, 0xD8, 0xFF, 0xE0, 0, 0x10, b'J', b'F', b'I', b'F'],
                Some("image/jpeg"),
            ),
            (b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR", None),
            (b"GIF89a\x01\0\x01\0", None),
            (b"PK\x03\x04\x14\0\0\0\x08\0", Some("application/zip")),
            (&gz, Some("application/gzip")),
            (&zst, Some("application/zstd")),
            (b"\xFD7zXZ\0\0\x04", Some("application/x-xz")),
            (b"the quick brown fox jumps over the lazy dog", None),
            (b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0", None),
            (b"%PDF-1.7\n", None),
        ];
        for (head, want) in cases {
            assert_eq!(already_compressed(head), want, "{:?}", &head[..head.len().min(8)]);
        }
        assert_eq!(already_compressed(&[]), None);
        assert_eq!(
            already_compressed(b"BM\x36\0\x0c\0\0\0\0\0\x36"),
            None,
            "BMP is raw pixels"
        );
    }
}
