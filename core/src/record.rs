//! The result format: one JSON object per line (JSON Lines). serde_json
//! escapes quotes, newlines and control characters, so any UTF-8 key and any
//! metadata value round-trips.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// HEAD answered; the record is complete.
    Ok,
    /// Listed, then gone (404) by the time of the HEAD.
    Vanished,
    /// HEAD failed for good; `error` says why.
    Error,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub key: String,
    pub status: Status,
    pub size: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etag: Option<String>,
    /// RFC 3339, UTC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_modified: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    /// User metadata without the `x-amz-meta-` prefix. Names are lower case:
    /// HTTP header names are case-insensitive and S3 stores them lower-cased.
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Record {
    /// Append the record and a newline to `out`.
    pub fn write_line(&self, out: &mut Vec<u8>) {
        serde_json::to_writer(&mut *out, self).expect("a record always serializes");
        out.push(b'\n');
    }
}

/// Decode a metadata value. S3 returns values that are not plain ASCII in RFC
/// 2047 form (`=?UTF-8?B?...?=` or `=?UTF-8?Q?...?=`); some servers send raw
/// UTF-8 bytes instead. Both come back as the original text.
pub fn decode_metadata_value(raw: &[u8]) -> String {
    let text = String::from_utf8_lossy(raw);
    decode_rfc2047(text.trim()).unwrap_or_else(|| text.into_owned())
}

fn decode_rfc2047(s: &str) -> Option<String> {
    let inner = s.strip_prefix("=?")?.strip_suffix("?=")?;
    let mut parts = inner.splitn(3, '?');
    let charset = parts.next()?;
    let encoding = parts.next()?;
    let payload = parts.next()?;
    if !charset.eq_ignore_ascii_case("utf-8") {
        return None;
    }
    let bytes = match encoding {
        "B" | "b" => base64_decode(payload)?,
        "Q" | "q" => {
            let spaced = payload.replace('_', " ");
            let mut out = Vec::new();
            let b = spaced.as_bytes();
            let mut i = 0;
            while i < b.len() {
                if b[i] == b'=' && i + 2 < b.len() {
                    out.push(u8::from_str_radix(std::str::from_utf8(&b[i + 1..i + 3]).ok()?, 16).ok()?);
                    i += 3;
                } else {
                    out.push(b[i]);
                    i += 1;
                }
            }
            out
        }
        _ => return None,
    };
    String::from_utf8(bytes).ok()
}

fn base64_decode(s: &str) -> Option<Vec<u8>> {
    aws_smithy_types::base64::decode(s).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn odd_keys_round_trip() {
        for key in [
            "a\"b",
            "line\nbreak",
            "\u{1}\u{1f}ctl",
            "ünï/cødé 💥",
            "\\back",
            "+ % # ? & =",
        ] {
            let mut rec = Record {
                key: key.into(),
                status: Status::Ok,
                size: 3,
                etag: Some("abc".into()),
                last_modified: None,
                storage_class: None,
                content_type: None,
                metadata: BTreeMap::from([("Name".into(), "välue\n\"x\"".into())]),
                error: None,
            };
            let mut line = Vec::new();
            rec.write_line(&mut line);
            assert_eq!(
                line.iter().filter(|b| **b == b'\n').count(),
                1,
                "one line per record"
            );
            let back: Record = serde_json::from_slice(&line).unwrap();
            assert_eq!(back, rec);
            rec.status = Status::Vanished;
            assert!(serde_json::to_string(&rec).unwrap().contains("\"vanished\""));
        }
    }

    #[test]
    fn metadata_values_decode() {
        assert_eq!(decode_metadata_value(b"plain"), "plain");
        assert_eq!(decode_metadata_value("Grüße".as_bytes()), "Grüße");
        assert_eq!(decode_metadata_value(b"=?UTF-8?B?R3LDvMOfZQ==?="), "Grüße");
        assert_eq!(decode_metadata_value(b"=?UTF-8?Q?Gr=C3=BC=C3=9Fe_x?="), "Grüße x");
        assert_eq!(decode_metadata_value(b"=?ISO-8859-1?Q?x?="), "=?ISO-8859-1?Q?x?=");
    }
}
