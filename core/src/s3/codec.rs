//! Text codecs of the S3 wire: keys in URL paths, URL-decoded listings,
//! quoted ETags, times, and RFC 2047 metadata values. Pure functions, the
//! bottom of `s3`.
//!
//! May import: `error` only.

use super::error::S3Error;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use std::collections::BTreeMap;

/// S3 keys are at most 1,024 bytes of UTF-8.
pub const MAX_KEY_BYTES: usize = 1024;

/// RFC 3986 unreserved characters stay, and `/` (S3 keys keep their slashes
/// in the path; S3 signs the path encoded once, not normalized).
pub(crate) const KEY_ENCODE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~')
    .remove(b'/');

/// Query names and values: everything but RFC 3986 unreserved characters is
/// encoded, `/` included (the canonical query of SigV4).
pub(crate) const QUERY_ENCODE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// How long a throttling answer asks the client to wait: AWS's
/// `x-amz-retry-after` (milliseconds) first, then HTTP's `Retry-After`
/// (seconds, or an HTTP date). `header` looks a header up by its lower-case
/// name. Unreadable values are ignored (the backoff applies).
pub fn retry_after<'a>(header: impl Fn(&str) -> Option<&'a str>) -> Option<std::time::Duration> {
    use std::time::{Duration, SystemTime};
    if let Some(ms) = header("x-amz-retry-after").and_then(|v| v.trim().parse::<u64>().ok()) {
        return Some(Duration::from_millis(ms));
    }
    let value = header("retry-after")?.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at =
        aws_smithy_types::DateTime::from_str(value, aws_smithy_types::date_time::Format::HttpDate).ok()?;
    let at = SystemTime::try_from(at).ok()?;
    Some(at.duration_since(SystemTime::now()).unwrap_or_default())
}

/// A key as it goes in a URL path (and in `x-amz-copy-source`); borrowed
/// when nothing in it needs encoding, as most keys (once per HEAD).
pub fn encode_key(key: &str) -> std::borrow::Cow<'_, str> {
    utf8_percent_encode(key, KEY_ENCODE).into()
}

/// Characters servers refuse in a `StartAfter`, even URL-encoded: they echo it
/// in XML, which cannot carry ASCII control characters (moto answers HTTP 500)
/// nor U+FFFE and U+FFFF.
fn refused_in_start_after(c: char) -> bool {
    c.is_ascii_control() || c == '\u{FFFE}' || c == '\u{FFFF}'
}

/// The `StartAfter` to send for `start_after`: the greatest string servers
/// accept (see [`refused_in_start_after`]) that sorts at or before it, `None`
/// for the empty string. The listing then starts a little early at worst, and
/// the caller drops the keys up to `start_after` ([`super::types::ListPage::keep_after`]):
/// pages emptied that way are why every listing loop follows continuation
/// tokens instead of stopping at an empty page.
pub fn wire_start_after(start_after: &str) -> Option<String> {
    let refused = start_after
        .char_indices()
        .find(|(_, c)| refused_in_start_after(*c));
    let Some((at, refused)) = refused else {
        return Some(start_after.to_string()).filter(|s| !s.is_empty());
    };
    let mut wire = start_after[..at].to_string();
    // The greatest accepted character below the refused one; below a C0
    // control there are only controls, so the accepted string ends before it.
    let below = match refused {
        '\u{7F}' => Some('~'),
        '\u{FFFE}' | '\u{FFFF}' => Some('\u{FFFD}'),
        _ => None,
    };
    if let Some(c) = below {
        wire.push(c);
        pad_with_greatest_accepted(&mut wire);
    }
    Some(wire).filter(|s| !s.is_empty())
}

/// Fill `s` up to [`MAX_KEY_BYTES`] with the greatest accepted characters:
/// U+10FFFF while four bytes fit, then the greatest accepted character of the
/// bytes left.
fn pad_with_greatest_accepted(s: &mut String) {
    while s.len() + 4 <= MAX_KEY_BYTES {
        s.push('\u{10FFFF}');
    }
    let tail = match MAX_KEY_BYTES - s.len() {
        3 => Some('\u{FFFD}'),
        2 => Some('\u{7FF}'),
        1 => Some('~'),
        _ => None,
    };
    s.extend(tail);
}

/// Decode a key from a listing with `encoding-type=url`. AWS encodes a space
/// as `+` (and a real `+` as `%2B`), so `+` is decoded first.
pub fn url_decode(s: &str) -> Result<String, S3Error> {
    if !s.contains(['+', '%']) {
        return Ok(s.to_string());
    }
    let plus_decoded = s.replace('+', " ");
    percent_encoding::percent_decode_str(&plus_decoded)
        .decode_utf8()
        .map(|c| c.into_owned())
        .map_err(|_| S3Error::Other(format!("listing returned a key that is not UTF-8: {s:?}")))
}

/// MinIO's `<UserTags>` of a listing entry: `k=v&k2=v2`, form-encoded (`+`
/// is a space). A pair that does not decode is kept as it came.
pub fn parse_user_tags(text: &str) -> BTreeMap<String, String> {
    let decode = |s: &str| url_decode(s).unwrap_or_else(|_| s.to_string());
    text.split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (decode(k), decode(v))
        })
        .collect()
}

pub fn strip_quotes(etag: &str) -> String {
    etag.trim_matches('"').to_string()
}

/// A HEAD's `Last-Modified` as a record's time: RFC 3339 UTC, the text
/// [`format_time`] makes of the parsed date. The usual form (IMF-fixdate,
/// `Sun, 06 Nov 1994 08:49:37 GMT`) is rearranged without parsing it into a
/// date and formatting it again, once per HEAD; anything else goes the long way.
pub fn http_date_to_rfc3339(value: &str) -> Option<String> {
    imf_fixdate_to_rfc3339(value).or_else(|| {
        aws_smithy_types::DateTime::from_str(value, aws_smithy_types::date_time::Format::HttpDate)
            .ok()
            .map(|t| format_time(&t))
    })
}

fn imf_fixdate_to_rfc3339(value: &str) -> Option<String> {
    const MONTHS: [&[u8]; 12] = [
        b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec",
    ];
    const WEEKDAYS: [&[u8]; 7] = [b"Mon", b"Tue", b"Wed", b"Thu", b"Fri", b"Sat", b"Sun"];
    let b = value.as_bytes();
    // "Www, DD Mon YYYY HH:MM:SS GMT"
    if b.len() != 29 || &b[3..5] != b", " || b[7] != b' ' || b[11] != b' ' || b[16] != b' ' {
        return None;
    }
    if b[19] != b':' || b[22] != b':' || &b[25..] != b" GMT" {
        return None;
    }
    let number = |range: std::ops::Range<usize>| -> Option<u32> {
        b[range].iter().try_fold(0u32, |n, d| {
            d.is_ascii_digit().then(|| n * 10 + u32::from(d - b'0'))
        })
    };
    let month = MONTHS.iter().position(|m| *m == &b[8..11])? + 1;
    let (year, day) = (number(12..16)?, number(5..7)?);
    let (hour, minute, second) = (number(17..19)?, number(20..22)?, number(23..25)?);
    let date =
        time::Date::from_calendar_date(year as i32, time::Month::try_from(month as u8).ok()?, day as u8)
            .ok()?;
    // A weekday that does not match the date, or a leap second: the long way decides.
    let weekday = WEEKDAYS[date.weekday().number_days_from_monday() as usize];
    if weekday != &b[0..3] || year < 1970 || hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let mut out = String::with_capacity(20);
    for part in [&value[12..16], "-"] {
        out.push_str(part);
    }
    out.push(char::from(b'0' + month as u8 / 10));
    out.push(char::from(b'0' + month as u8 % 10));
    for part in ["-", &value[5..7], "T", &value[17..25], "Z"] {
        out.push_str(part);
    }
    Some(out)
}

/// Times in records are RFC 3339 UTC, whichever call produced them.
pub fn format_time(t: &aws_smithy_types::DateTime) -> String {
    t.fmt(aws_smithy_types::date_time::Format::DateTime)
        .unwrap_or_default()
}

/// Decode a metadata value. S3 returns values that are not plain ASCII in RFC
/// 2047 form (`=?UTF-8?B?...?=` or `=?UTF-8?Q?...?=`); some servers send raw
/// UTF-8 bytes instead. Both come back as the original text. (For listings,
/// whose XML is text already; a HEAD answer goes through [`MetadataReader`],
/// which keeps bytes that are not UTF-8.)
pub fn decode_metadata_value(raw: &[u8]) -> String {
    String::from_utf8_lossy(&decode_metadata_bytes(raw)).into_owned()
}

/// A value's bytes: RFC 2047 decoded where it is in that form, else the
/// bytes sent, surrounding whitespace trimmed as HTTP does.
fn decode_metadata_bytes(raw: &[u8]) -> Vec<u8> {
    let trimmed = raw.trim_ascii();
    std::str::from_utf8(trimmed)
        .ok()
        .and_then(decode_rfc2047)
        .unwrap_or_else(|| trimmed.to_vec())
}

/// User metadata from a HEAD answer's `x-amz-meta-*` headers, header by
/// header, without losing any: a name sent more than once keeps every value,
/// joined by `,` in the order sent (as HTTP combines repeated fields, RFC
/// 9110 section 5.3); a value that is not UTF-8 is kept as the base64 of its
/// bytes and its name listed in [`UserMetadata::binary`].
#[derive(Debug, Default)]
pub struct MetadataReader {
    values: BTreeMap<String, Vec<u8>>,
}

/// What [`MetadataReader`] read.
#[derive(Debug, Default, PartialEq)]
pub struct UserMetadata {
    pub values: BTreeMap<String, String>,
    /// Names whose value is the base64 of bytes that are not UTF-8.
    pub binary: Vec<String>,
}

impl MetadataReader {
    /// One header: `name` lower case without the `x-amz-meta-` prefix.
    pub fn add(&mut self, name: &str, raw: &[u8]) {
        let value = decode_metadata_bytes(raw);
        match self.values.get_mut(name) {
            Some(earlier) => {
                earlier.push(b',');
                earlier.extend_from_slice(&value);
            }
            None => {
                self.values.insert(name.to_string(), value);
            }
        }
    }

    pub fn finish(self) -> UserMetadata {
        let mut out = UserMetadata::default();
        for (name, bytes) in self.values {
            let value = String::from_utf8(bytes).unwrap_or_else(|e| {
                out.binary.push(name.clone());
                aws_smithy_types::base64::encode(e.as_bytes())
            });
            out.values.insert(name, value);
        }
        out
    }
}

/// The bytes an RFC 2047 encoded word stands for, when `s` is one in UTF-8
/// or ISO-8859-1 (the charsets S3 and its clients use).
fn decode_rfc2047(s: &str) -> Option<Vec<u8>> {
    let inner = s.strip_prefix("=?")?.strip_suffix("?=")?;
    let mut parts = inner.splitn(3, '?');
    let charset = parts.next()?;
    let encoding = parts.next()?;
    let payload = parts.next()?;
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
    if charset.eq_ignore_ascii_case("utf-8") {
        Some(bytes)
    } else if charset.eq_ignore_ascii_case("iso-8859-1") {
        // Each byte is the code point of the same number.
        Some(
            bytes
                .iter()
                .map(|&b| char::from(b))
                .collect::<String>()
                .into_bytes(),
        )
    } else {
        None
    }
}

fn base64_decode(s: &str) -> Option<Vec<u8>> {
    aws_smithy_types::base64::decode(s).ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn http_dates_become_the_same_rfc3339_text_the_long_way_makes() {
        use aws_smithy_types::date_time::{DateTime, Format};
        let long_way = |v: &str| {
            DateTime::from_str(v, Format::HttpDate)
                .ok()
                .map(|t| format_time(&t))
        };
        // Every day of four years around a leap year and the turn of a
        // century, at changing times of day.
        let start = 946_684_800 - 3 * 365 * 86_400; // 1997
        for day in 0..(5 * 366) {
            let secs = start + day * 86_400 + (day * 7_919) % 86_400;
            let value = DateTime::from_secs(secs).fmt(Format::HttpDate).unwrap();
            assert_eq!(imf_fixdate_to_rfc3339(&value), long_way(&value), "{value}");
            assert!(imf_fixdate_to_rfc3339(&value).is_some(), "{value}: the fast way");
        }
        assert_eq!(
            http_date_to_rfc3339("Wed, 25 Nov 2026 01:02:03 GMT").as_deref(),
            Some("2026-11-25T01:02:03Z")
        );
        // Not IMF-fixdate, or not a real date: the long way decides.
        for odd in [
            "Thu, 25 Nov 2026 01:02:03 GMT", // the wrong weekday
            "Wed, 31 Feb 2026 01:02:03 GMT",
            "Wed, 25 Nov 2026 24:02:03 GMT",
            "Wednesday, 25-Nov-26 01:02:03 GMT",
            "Wed Nov 25 01:02:03 2026",
            "Wed, 25 Xyz 2026 01:02:03 GMT",
            "Wed, 2a Nov 2026 01:02:03 GMT",
            "",
            "garbage",
        ] {
            assert_eq!(imf_fixdate_to_rfc3339(odd), None, "{odd}");
            assert_eq!(http_date_to_rfc3339(odd), long_way(odd), "{odd}");
        }
    }

    use super::*;

    #[test]
    fn start_after_goes_on_the_wire_as_the_greatest_accepted_string_at_or_before_it() {
        assert_eq!(wire_start_after("a/b").as_deref(), Some("a/b"));
        assert_eq!(wire_start_after(""), None);
        // Below a C0 control there are only controls: the string ends before it.
        assert_eq!(wire_start_after("a/\u{1}b").as_deref(), Some("a/"));
        assert_eq!(wire_start_after("tab\there").as_deref(), Some("tab"));
        assert_eq!(wire_start_after("\nx"), None);
        // Below DEL, U+FFFE and U+FFFF there are accepted characters, padded.
        let del = wire_start_after("ü\u{7f}x").unwrap();
        assert!(
            del.starts_with("ü~\u{10FFFF}") && del.len() == MAX_KEY_BYTES,
            "{del:?}"
        );
        let nonchar = wire_start_after("a\u{FFFF}").unwrap();
        assert!(nonchar.starts_with("a\u{FFFD}\u{10FFFF}") && nonchar.len() == MAX_KEY_BYTES);
        for s in [del, nonchar] {
            assert!(!s.chars().any(refused_in_start_after), "{s:?}");
        }
        // Exactly the greatest: the padding ends with the greatest accepted
        // character of the bytes left (3 here: U+FFFD, not the refused U+FFFF).
        let wire = wire_start_after("kk\u{FFFE}").unwrap();
        let padded = format!("kk\u{FFFD}{}\u{FFFD}", "\u{10FFFF}".repeat(254));
        assert_eq!(wire, padded);
        assert_eq!(wire.len(), MAX_KEY_BYTES);
    }

    #[test]
    fn retry_after_reads_aws_milliseconds_then_http_seconds_or_date() {
        use std::time::Duration;
        let read = |pairs: &[(&str, &str)]| {
            let pairs = pairs.to_vec();
            retry_after(move |name| pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| *v))
        };
        assert_eq!(
            read(&[("x-amz-retry-after", "1500")]),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(
            read(&[("x-amz-retry-after", "250"), ("retry-after", "9")]),
            Some(Duration::from_millis(250))
        );
        assert_eq!(read(&[("retry-after", " 3 ")]), Some(Duration::from_secs(3)));
        assert_eq!(
            read(&[("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT")]),
            Some(Duration::ZERO)
        );
        let in_a_minute =
            aws_smithy_types::DateTime::from(std::time::SystemTime::now() + Duration::from_secs(60))
                .fmt(aws_smithy_types::date_time::Format::HttpDate)
                .unwrap();
        let wait = read(&[("retry-after", in_a_minute.as_str())]).unwrap();
        assert!(
            wait > Duration::from_secs(50) && wait <= Duration::from_secs(60),
            "{wait:?}"
        );
        assert_eq!(read(&[("retry-after", "soon")]), None);
        assert_eq!(read(&[]), None);
    }

    #[test]
    fn url_decoding_handles_plus_and_percent() {
        assert_eq!(url_decode("a+b%2Bc%20d").unwrap(), "a b+c d");
        assert_eq!(url_decode("%E2%9C%93%0A%01").unwrap(), "\u{2713}\n\u{1}");
        assert!(url_decode("%FF").is_err());
    }

    #[test]
    fn metadata_values_decode() {
        assert_eq!(decode_metadata_value(b"plain"), "plain");
        assert_eq!(decode_metadata_value("Grüße".as_bytes()), "Grüße");
        assert_eq!(decode_metadata_value(b"=?UTF-8?B?R3LDvMOfZQ==?="), "Grüße");
        assert_eq!(decode_metadata_value(b"=?UTF-8?Q?Gr=C3=BC=C3=9Fe_x?="), "Grüße x");
        assert_eq!(decode_metadata_value(b"=?ISO-8859-1?Q?Gr=FC=DFe?="), "Grüße");
        assert_eq!(decode_metadata_value(b"=?KOI8-R?Q?x?="), "=?KOI8-R?Q?x?=");
        assert_eq!(decode_metadata_value(b" \tpadded \t"), "padded");
    }

    /// Repeated headers keep every value; bytes that are not UTF-8 are kept
    /// (base64) and flagged, never replaced by U+FFFD.
    #[test]
    fn metadata_headers_lose_nothing() {
        let mut reader = MetadataReader::default();
        reader.add("tag", b"a");
        reader.add("raw", b"caf\xe9 \xff");
        reader.add("tag", b"=?UTF-8?B?R3LDvMOfZQ==?=");
        reader.add("plain", "Grüße".as_bytes());
        reader.add("bad-word", b"=?UTF-8?B?/w==?=");
        let read = reader.finish();
        assert_eq!(read.values["tag"], "a,Grüße");
        assert_eq!(read.values["plain"], "Grüße");
        assert_eq!(
            read.values["raw"],
            aws_smithy_types::base64::encode(b"caf\xe9 \xff")
        );
        assert_eq!(read.values["bad-word"], aws_smithy_types::base64::encode(b"\xff"));
        assert_eq!(read.binary, ["bad-word", "raw"]);
    }

    #[test]
    fn listed_user_tags_are_form_decoded() {
        let tags = parse_user_tags("a=b+c&k%26=v%3D1&empty=&bare");
        let expected: BTreeMap<String, String> = [("a", "b c"), ("k&", "v=1"), ("empty", ""), ("bare", "")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(tags, expected);
        assert!(parse_user_tags("").is_empty());
    }
}
