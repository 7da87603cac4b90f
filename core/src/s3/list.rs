//! The fast LIST path: ListObjectsV2 signed and sent like the fast HEAD path,
//! and its XML read by a small scanner instead of aws-sdk-s3's deserializer.
//! The benchmark (BENCHMARKS.md) found the SDK spending about 3 ms of CPU on
//! a page of 1,000 keys, as much as the HEADs of a fifth of them; this reads
//! the same page in a tenth of that. Only the elements a scan uses are read;
//! `worker/tests/scan_cli.rs` checks every page against the SDK's listing of
//! the same bucket (odd keys on moto, signatures on versitygw).
//!
//! May import: `signed` and the bottom of `s3` (types, codec, error).

use super::codec::{
    decode_metadata_value, format_time, parse_user_tags, retry_after, strip_quotes, url_decode, QUERY_ENCODE,
};
use super::error::{error_chain, S3Error};
use super::signed::SignedClient;
use super::types::{ListPage, ListRequest, ListedMetadata, ListedObject};
use http::StatusCode;
use http_body_util::BodyExt;
use percent_encoding::utf8_percent_encode;

/// The query of a ListObjectsV2 request in canonical form (names sorted,
/// values encoded): the same string goes in the URL and in the signature.
pub fn list_query(req: &ListRequest, start_after: Option<&str>) -> String {
    let max_keys = req.max_keys.to_string();
    let mut params: Vec<(&str, &str)> = vec![
        ("encoding-type", "url"),
        ("list-type", "2"),
        ("max-keys", &max_keys),
        ("prefix", &req.prefix),
    ];
    if let Some(token) = &req.continuation {
        params.push(("continuation-token", token));
    }
    if let Some(d) = &req.delimiter {
        params.push(("delimiter", d));
    }
    if let Some(a) = start_after {
        params.push(("start-after", a));
    }
    if req.with_metadata {
        params.push(("metadata", "true"));
    }
    canonical_query(&mut params)
}

/// Query parameters in canonical form: sorted by name, values encoded, as
/// the URL and the signature both carry them.
pub(super) fn canonical_query(params: &mut [(&str, &str)]) -> String {
    params.sort_unstable_by_key(|(name, _)| *name);
    let mut query = String::with_capacity(128);
    for (i, (name, value)) in params.iter().enumerate() {
        if i > 0 {
            query.push('&');
        }
        query.push_str(name);
        query.push('=');
        query.extend(utf8_percent_encode(value, QUERY_ENCODE));
    }
    query
}

impl SignedClient {
    /// One ListObjectsV2 attempt (the caller retries), `start_after` as it
    /// goes on the wire.
    pub async fn list(
        &self,
        bucket: &str,
        req: &ListRequest,
        start_after: Option<&str>,
    ) -> Result<ListPage, S3Error> {
        self.get_listing(
            bucket,
            &list_query(req, start_after),
            "<ListBucketResult",
            parse_list,
        )
        .await
    }

    /// One GET of a listing (`query` in canonical form) whose answer must
    /// hold `root`, read by `parse`; any other answer is the error it says.
    pub(super) async fn get_listing<T>(
        &self,
        bucket: &str,
        query: &str,
        root: &str,
        parse: impl FnOnce(&str) -> Result<T, S3Error>,
    ) -> Result<T, S3Error> {
        let (resp, region) = self.send("GET", bucket, "", query).await?;
        let status = resp.status();
        let (http::response::Parts { headers, .. }, body) = resp.into_parts();
        let content_type = headers
            .get(http::header::CONTENT_TYPE)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        let _turn = self.listing_turn().await;
        let limited = http_body_util::Limited::new(body, self.max_listing());
        let body = tokio::time::timeout(self.timeout(), limited.collect())
            .await
            .map_err(|_| S3Error::Timeout(self.timeout()))?
            .map_err(|e| match e.downcast_ref::<http_body_util::LengthLimitError>() {
                Some(_) => S3Error::Other(format!(
                    "the listing's answer is longer than {} bytes, which no S3 page is: \
                     the endpoint is not an S3 store, or misbehaves",
                    self.max_listing()
                )),
                None => S3Error::Connection(error_chain(&*e)),
            })?
            .to_bytes();
        // Valid UTF-8 as a rule: `from_utf8` checks it a word at a time,
        // `from_utf8_lossy` a character at a time (1 % of a scan's CPU).
        let xml = match std::str::from_utf8(&body) {
            Ok(text) => std::borrow::Cow::Borrowed(text),
            // Decoded lossily, a key would become another key (its HEAD a
            // 404: the object "vanished") and the real one would be lost.
            Err(_) if status == StatusCode::OK => return Err(not_utf8()),
            Err(_) => String::from_utf8_lossy(&body),
        };
        if status != StatusCode::OK {
            // A wrong region, said by an S3 error code: regions launched
            // after 2019 name the region only in the document.
            let code = element(&xml, "Code");
            let named = element(&xml, "Region").map(unescape);
            let header = |name: &str| headers.get(name)?.to_str().ok();
            let learnt = self.learnt();
            let (code_num, at) = (status.as_u16(), None);
            if let Some(e) = learnt.correction(code_num, header, code, named.as_deref(), bucket, &region, at)
            {
                return Err(e);
            }
            let wait = retry_after(|name| headers.get(name)?.to_str().ok());
            return Err(error_document(status, &xml, bucket).with_retry_after(wait));
        }
        if !xml.contains(root) {
            return Err(not_s3(content_type.as_deref(), &xml));
        }
        parse(&xml)
    }
}

/// A listing whose bytes are not UTF-8 (S3 sends its XML in UTF-8, and
/// keys URL-encoded).
fn not_utf8() -> S3Error {
    S3Error::BadAnswer(
        "a listing that is not valid UTF-8: its keys cannot be read as they are (S3 sends UTF-8 XML; check the endpoint or the store's encoding)"
            .into(),
    )
}

/// A successful answer that is no listing at all: the endpoint is a web
/// server, a proxy's page or another API, not S3.
///
/// The answer's body is never quoted: the operator sends requests to
/// endpoints tenants name and shows its errors in their scans' status, so
/// quoting would read any internal URL back to them (a kubelet's port, a
/// metadata service). Its type and length say enough to tell a web page.
fn not_s3(content_type: Option<&str>, body: &str) -> S3Error {
    S3Error::Config(format!(
        "the endpoint answered a LIST with {} ({} bytes) instead of an S3 ListBucketResult: is it an S3 \
         API endpoint (not a console or web page)?",
        content_type.unwrap_or("no content type"),
        body.len()
    ))
}

/// An S3 error answer as our error, with its code and message.
fn error_document(status: StatusCode, xml: &str, bucket: &str) -> S3Error {
    let code = element(xml, "Code").map(unescape);
    let mut mapped = S3Error::from_status(status.as_u16(), code.as_deref(), bucket);
    if let S3Error::Client { detail, .. }
    | S3Error::Server { detail, .. }
    | S3Error::ExpiredToken { detail } = &mut mapped
    {
        if code.is_none() {
            // Not an S3 error document: never quoted (see `not_s3`).
            *detail = format!(
                "HTTP {status} with an answer that is not an S3 error document ({} bytes)",
                xml.len()
            );
        } else if let Some(message) = element(xml, "Message") {
            detail.push_str(": ");
            detail.push_str(&unescape(message));
        }
    }
    mapped
}

/// An entry's `Size`: missing or not a number is an error, never 0.
pub(super) fn listed_size(size: Option<&str>, key: &str) -> Result<u64, S3Error> {
    size.and_then(|s| s.trim().parse().ok())
        .ok_or_else(|| S3Error::BadAnswer(format!("LIST entry {key:?} without a valid Size (got {size:?})")))
}

/// Read a ListBucketResult: keys, sizes, ETags, times and storage classes of
/// `Contents`, the `CommonPrefixes`, and where to continue. Keys and prefixes
/// are URL-decoded when the answer says `EncodingType` url.
/// Keys, or common prefixes, a page may hold: S3 sends at most 1000 (its
/// `max-keys` limit); this leaves room for stores that send more, and
/// bounds what a page of tiny entries takes once decoded (several times its
/// bytes).
pub const MAX_PAGE_ENTRIES: usize = 10_000;

fn too_many_entries() -> S3Error {
    S3Error::Other(format!(
        "the listing's page holds more than {MAX_PAGE_ENTRIES} entries, which no S3 page does (1000 at \
         most): the endpoint is not an S3 store, or misbehaves"
    ))
}

pub fn parse_list(xml: &str) -> Result<ListPage, S3Error> {
    if !xml.contains("<ListBucketResult") {
        return Err(S3Error::Other(format!(
            "LIST answer is not a ListBucketResult: {}",
            xml.chars().take(200).collect::<String>()
        )));
    }
    let decode = key_decoder(xml);
    let mut objects = Vec::with_capacity(1000);
    // Entries of a page often share their time: parse each distinct one once.
    let mut last_time: Option<(String, Option<String>)> = None;
    for block in blocks(xml, "Contents") {
        if objects.len() >= MAX_PAGE_ENTRIES {
            return Err(too_many_entries());
        }
        let entry = EntryFields::of(block);
        let key = entry
            .key
            .ok_or_else(|| S3Error::Other("LIST entry without a Key".into()))?;
        let key = decode(key)?;
        objects.push(ListedObject {
            size: listed_size(entry.size, &key)?,
            key,
            etag: entry.etag.map(|e| strip_quotes(&unescape(e))),
            last_modified: entry.last_modified.and_then(|raw| match &last_time {
                Some((seen, formatted)) if *seen == raw => formatted.clone(),
                _ => {
                    let formatted = aws_smithy_types::DateTime::from_str(
                        raw.trim(),
                        aws_smithy_types::date_time::Format::DateTime,
                    )
                    .ok()
                    .map(|t| format_time(&t));
                    last_time = Some((raw.to_string(), formatted.clone()));
                    formatted
                }
            }),
            storage_class: entry.storage_class.map(unescape),
            checksum_algorithm: entry.checksum_algorithm.map(unescape),
            checksum_type: entry.checksum_type.map(unescape),
            listed_metadata: entry
                .user_metadata
                .map(|m| Box::new(listed_metadata(m, entry.user_tags))),
        });
    }
    let common_prefixes: Vec<String> = blocks(xml, "CommonPrefixes")
        .filter_map(|block| element(block, "Prefix"))
        .take(MAX_PAGE_ENTRIES + 1)
        .map(decode)
        .collect::<Result<_, _>>()?;
    if common_prefixes.len() > MAX_PAGE_ENTRIES {
        return Err(too_many_entries());
    }
    let truncated = element(xml, "IsTruncated").is_some_and(|t| t.trim() == "true");
    let next = element(xml, "NextContinuationToken").map(unescape);
    if truncated && next.is_none() {
        return Err(S3Error::Other(
            "server said the listing is truncated but sent no continuation token".into(),
        ));
    }
    Ok(ListPage {
        objects,
        common_prefixes,
        next: if truncated { next } else { None },
    })
}

/// How a listing's keys and prefixes are read: unescaped, and URL-decoded
/// when the answer says `EncodingType` url.
pub(super) fn key_decoder(xml: &str) -> impl Fn(&str) -> Result<String, S3Error> {
    let url_encoded = element(xml, "EncodingType").is_some_and(|e| e.eq_ignore_ascii_case("url"));
    move |raw: &str| {
        let text = unescape_cow(raw);
        if url_encoded {
            url_decode(&text)
        } else {
            Ok(text.into_owned())
        }
    }
}

/// What an entry's `<UserMetadata>` element holds: `x-amz-meta-*` names
/// lower-cased without the prefix and values decoded as a HEAD answer's are (`decode_metadata_value`, surrounding
/// blanks dropped as HTTP drops them from header values), the content type,
/// and the headers of `ObjectColumns` (MinIO adds content-type, SSE and
/// object lock headers beside them).
fn listed_metadata(user_metadata: &str, user_tags: Option<&str>) -> ListedMetadata {
    let mut listed = ListedMetadata::default();
    // Beside `<UserMetadata>` (the credentials may read the object), no
    // `<UserTags>` is no tags: MinIO leaves an empty one out.
    listed.columns.object_tags = Some(
        user_tags
            .map(|t| parse_user_tags(&unescape(t)))
            .unwrap_or_default(),
    );
    for (name, text) in children(user_metadata) {
        let lower = name.to_ascii_lowercase();
        let value = || decode_metadata_value(unescape(text).trim_matches([' ', '\t']).as_bytes());
        if let Some(meta) = lower.strip_prefix("x-amz-meta-") {
            listed.metadata.insert(meta.to_string(), value());
        } else if lower == "content-type" {
            listed.content_type = Some(value());
        } else if let Some(amz) = lower.strip_prefix("x-amz-") {
            listed.columns.read_header(amz, unescape(text).as_bytes());
        }
    }
    listed
}

/// The raw text of the elements of one `<Contents>` entry a scan reads,
/// found in one pass over its tags (an element search per field went over
/// the entry six times: about 7 % of a scan's CPU, docs/head-path.md). The
/// first occurrence of each counts; `<Name/>` is empty text.
#[derive(Debug, Default, PartialEq)]
struct EntryFields<'a> {
    key: Option<&'a str>,
    size: Option<&'a str>,
    etag: Option<&'a str>,
    last_modified: Option<&'a str>,
    storage_class: Option<&'a str>,
    checksum_algorithm: Option<&'a str>,
    checksum_type: Option<&'a str>,
    /// MinIO's `<UserTags>` (`metadata=true`): `k=v&k2=v2`.
    user_tags: Option<&'a str>,
    /// What `<UserMetadata>` (MinIO's `metadata=true`) holds: its children
    /// are named by the object's metadata, not the listing, so none of them
    /// is taken for an entry's field.
    user_metadata: Option<&'a str>,
}

impl<'a> EntryFields<'a> {
    fn of(entry: &'a str) -> EntryFields<'a> {
        const METADATA_CLOSE: &str = "</UserMetadata>";
        let mut fields = EntryFields::default();
        let mut rest = entry;
        while let Some(open) = memchr::memchr(b'<', rest.as_bytes()) {
            let after = &rest[open + 1..];
            let Some(tag_len) = memchr::memchr(b'>', after.as_bytes()) else {
                break;
            };
            let tag = &after[..tag_len];
            rest = &after[tag_len + 1..];
            if tag.starts_with(['/', '?', '!']) {
                continue; // a closing tag (of a container), or no element
            }
            if let Some(name) = tag.strip_suffix('/') {
                fields.set(name.trim_end(), "");
                continue;
            }
            if tag == "UserMetadata" {
                let Some(len) = find_tag(rest, METADATA_CLOSE) else {
                    break;
                };
                fields.user_metadata.get_or_insert(&rest[..len]);
                rest = &rest[len + METADATA_CLOSE.len()..];
                continue;
            }
            // Element text holds no raw `<`: the next tag closes a leaf. Any
            // other tag there makes this a container, read on inside it.
            let Some(text_len) = rest.find('<') else { break };
            let closes = rest[text_len + 1..]
                .strip_prefix('/')
                .and_then(|r| r.strip_prefix(tag))
                .is_some_and(|r| r.starts_with('>'));
            if closes {
                fields.set(tag, &rest[..text_len]);
                rest = &rest[text_len + 2 + tag.len() + 1..];
            }
        }
        fields
    }

    fn set(&mut self, name: &str, text: &'a str) {
        let slot = match name {
            "Key" => &mut self.key,
            "Size" => &mut self.size,
            "ETag" => &mut self.etag,
            "LastModified" => &mut self.last_modified,
            "StorageClass" => &mut self.storage_class,
            "ChecksumAlgorithm" => &mut self.checksum_algorithm,
            "ChecksumType" => &mut self.checksum_type,
            "UserTags" => &mut self.user_tags,
            _ => return,
        };
        slot.get_or_insert(text);
    }
}

/// The child elements of `xml` as (name, raw text): `<a>x</a><b/>` gives
/// `("a", "x")`, `("b", "")`. Children are flat (no element inside them).
fn children(xml: &str) -> impl Iterator<Item = (&str, &str)> {
    let mut rest = xml;
    std::iter::from_fn(move || {
        let open = rest.find('<')?;
        let tag_len = rest[open..].find('>')?;
        let tag = &rest[open + 1..open + tag_len];
        rest = &rest[open + tag_len + 1..];
        if let Some(name) = tag.strip_suffix('/') {
            return Some((name.trim_end(), ""));
        }
        let close = format!("</{tag}>");
        let len = rest.find(&close)?;
        let text = &rest[..len];
        rest = &rest[len + close.len()..];
        Some((tag, text))
    })
}

/// The bodies of every `<name>...</name>` in `xml`, in order.
pub(super) fn blocks<'a>(xml: &'a str, name: &str) -> impl Iterator<Item = &'a str> {
    let (open, close) = (format!("<{name}>"), format!("</{name}>"));
    let mut rest = xml;
    std::iter::from_fn(move || {
        let start = find_tag(rest, &open)? + open.len();
        let len = find_tag(&rest[start..], &close)?;
        let body = &rest[start..start + len];
        rest = &rest[start + len + close.len()..];
        Some(body)
    })
}

/// The text of the first `<name>` element in `xml` (`<name/>` is empty).
pub(crate) fn element<'a>(xml: &'a str, name: &str) -> Option<&'a str> {
    let mut open = String::with_capacity(name.len() + 3);
    open.push('<');
    open.push_str(name);
    open.push('>');
    match find_tag(xml, &open) {
        Some(at) => {
            let start = at + open.len();
            let text = &xml[start..];
            // Element text holds no raw `<`: the first one closes it.
            let len = text.find('<')?;
            text[len + 1..]
                .strip_prefix('/')?
                .starts_with(name)
                .then_some(&text[..len])
        }
        None => {
            open.insert(open.len() - 1, '/');
            find_tag(xml, &open).map(|_| "")
        }
    }
}

/// Where `tag` (which starts with `<`) first occurs in `xml`. Every `<`
/// starts a tag, so jumping from one to the next (a memchr) and comparing
/// there beats a general substring search, whose set-up alone cost more than
/// the search on blocks this short: with several elements read from every
/// one of a page's 1,000 entries it was 4 % of a scan's CPU (perf).
pub(super) fn find_tag(xml: &str, tag: &str) -> Option<usize> {
    debug_assert!(tag.starts_with('<'));
    let (bytes, tag) = (xml.as_bytes(), tag.as_bytes());
    let mut from = 0;
    // memchr, not str::find(char): the latter's searcher was 11 % of an
    // incremental scan's CPU (perf, 2026-11-28), LIST parsing being most of it.
    while let Some(i) = memchr::memchr(b'<', &bytes[from..]) {
        let at = from + i;
        if bytes[at..].starts_with(tag) {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

/// Replace XML's character references (`&amp;`, `&#x1;`...) in element text.
pub(super) fn unescape(text: &str) -> String {
    unescape_cow(text).into_owned()
}

pub(super) fn unescape_cow(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains('&') {
        return text.into();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        let Some(end) = rest.find(';') else { break };
        let entity = &rest[1..end];
        let ch = match entity {
            "amp" => Some('&'),
            "lt" => Some('<'),
            "gt" => Some('>'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            _ => entity
                .strip_prefix("#x")
                .or_else(|| entity.strip_prefix("#X"))
                .map(|hex| u32::from_str_radix(hex, 16))
                .or_else(|| entity.strip_prefix('#').map(str::parse))
                .and_then(Result::ok)
                .and_then(char::from_u32),
        };
        match ch {
            Some(c) => {
                out.push(c);
                rest = &rest[end + 1..];
            }
            None => {
                // Not a reference we know: keep it as it came.
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>b</Name><Prefix>a%2F</Prefix>
  <KeyCount>3</KeyCount><MaxKeys>3</MaxKeys><Delimiter>/</Delimiter><EncodingType>url</EncodingType>
  <IsTruncated>true</IsTruncated><NextContinuationToken>t&amp;1/+=</NextContinuationToken>
  <Contents><Key>a%2Fwith+space%2Bplus%26amp</Key><LastModified>2026-11-02T10:00:00.000Z</LastModified>
    <ETag>&quot;0a1b&quot;</ETag><Size>12</Size><Owner><ID>x</ID></Owner><StorageClass>STANDARD</StorageClass>
    <ChecksumAlgorithm>CRC64NVME</ChecksumAlgorithm><ChecksumType>FULL_OBJECT</ChecksumType></Contents>
  <Contents><Key>a%2F%C3%BC%01</Key><LastModified>2026-11-02T10:00:01Z</LastModified><ETag>"e"</ETag><Size>0</Size></Contents>
  <CommonPrefixes><Prefix>a%2Fdir%2F</Prefix></CommonPrefixes>
</ListBucketResult>"#;

    #[test]
    fn a_page_is_read_like_the_sdk_reads_it() {
        let page = parse_list(PAGE).unwrap();
        assert_eq!(
            page.objects,
            vec![
                ListedObject {
                    key: "a/with space+plus&amp".into(),
                    size: 12,
                    etag: Some("0a1b".into()),
                    last_modified: Some("2026-11-02T10:00:00Z".into()),
                    storage_class: Some("STANDARD".into()),
                    checksum_algorithm: Some("CRC64NVME".into()),
                    checksum_type: Some("FULL_OBJECT".into()),
                    listed_metadata: None,
                },
                ListedObject {
                    key: "a/ü\u{1}".into(),
                    size: 0,
                    etag: Some("e".into()),
                    last_modified: Some("2026-11-02T10:00:01Z".into()),
                    storage_class: None,
                    checksum_algorithm: None,
                    checksum_type: None,
                    listed_metadata: None,
                },
            ]
        );
        assert_eq!(page.common_prefixes, vec!["a/dir/".to_string()]);
        assert_eq!(page.next.as_deref(), Some("t&1/+="));
    }

    #[test]
    fn a_page_of_more_entries_than_any_store_sends_is_refused() {
        let page = |contents: usize, prefixes: usize| {
            format!(
                "<ListBucketResult>{}{}<IsTruncated>false</IsTruncated></ListBucketResult>",
                "<Contents><Key>k</Key><Size>0</Size></Contents>".repeat(contents),
                "<CommonPrefixes><Prefix>p/</Prefix></CommonPrefixes>".repeat(prefixes)
            )
        };
        assert_eq!(
            parse_list(&page(MAX_PAGE_ENTRIES, MAX_PAGE_ENTRIES))
                .unwrap()
                .objects
                .len(),
            MAX_PAGE_ENTRIES
        );
        for (contents, prefixes) in [(MAX_PAGE_ENTRIES + 1, 0), (0, MAX_PAGE_ENTRIES + 1)] {
            let err = parse_list(&page(contents, prefixes)).unwrap_err().to_string();
            assert!(
                err.contains(&format!("more than {MAX_PAGE_ENTRIES} entries")),
                "{err}"
            );
        }
    }

    #[test]
    fn elements_are_found_by_their_whole_tag() {
        let xml = "<E><KeyCount>2</KeyCount><Key>k</Key><Empty/><Ke>x</Ke><Owner><ID>i</ID></Owner></E>";
        assert_eq!(element(xml, "Key"), Some("k"));
        assert_eq!(element(xml, "KeyCount"), Some("2"));
        assert_eq!(element(xml, "Ke"), Some("x"));
        assert_eq!(element(xml, "Empty"), Some(""));
        assert_eq!(element(xml, "ID"), Some("i"));
        assert_eq!(element(xml, "Missing"), None);
        // Not text but elements inside: not an element's text.
        assert_eq!(element(xml, "Owner"), None);
        assert_eq!(find_tag("a<b<Key>", "<Key>"), Some(3));
        assert_eq!(find_tag("<Ke", "<Key>"), None);
        assert_eq!(
            blocks("<C>1</C>x<C>2</C><C>3", "C").collect::<Vec<_>>(),
            ["1", "2"]
        );
    }

    #[test]
    fn keys_are_taken_as_they_are_without_url_encoding() {
        let xml =
            "<ListBucketResult><IsTruncated>false</IsTruncated><Contents><Key>a+b%20&lt;&#x1;&#233;</Key>\
                   <Size>1</Size></Contents><CommonPrefixes><Prefix/></CommonPrefixes></ListBucketResult>";
        let page = parse_list(xml).unwrap();
        assert_eq!(page.objects[0].key, "a+b%20<\u{1}é");
        assert_eq!(page.common_prefixes, vec![String::new()]);
        assert_eq!(page.next, None);
    }

    #[test]
    fn truncated_without_token_and_non_listings_are_errors() {
        assert!(parse_list("<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>").is_err());
        assert!(parse_list("<html>proxy error</html>").is_err());
    }

    #[test]
    fn an_entry_without_a_valid_size_is_an_error_not_zero() {
        for size in ["", "<Size></Size>", "<Size>12x</Size>", "<Size>-1</Size>"] {
            let xml = format!(
                "<ListBucketResult><IsTruncated>false</IsTruncated><Contents><Key>k</Key>{size}</Contents></ListBucketResult>"
            );
            let e = parse_list(&xml).unwrap_err();
            assert!(
                e.to_string().contains("LIST entry \"k\" without a valid Size"),
                "{size}: {e}"
            );
        }
    }

    #[test]
    fn error_documents_keep_their_code_and_message() {
        let xml = "<Error><Code>NoSuchBucket</Code><Message>gone</Message></Error>";
        assert!(matches!(
            error_document(StatusCode::NOT_FOUND, xml, "b"),
            S3Error::NoSuchBucket { .. }
        ));
        let xml = "<Error><Code>InvalidArgument</Code><Message>bad &amp; wrong</Message></Error>";
        let e = error_document(StatusCode::BAD_REQUEST, xml, "b");
        assert!(e.to_string().contains("InvalidArgument: bad & wrong"), "{e}");
        let xml =
            "<Error><Code>ExpiredToken</Code><Message>The provided token has expired.</Message></Error>";
        let e = error_document(StatusCode::BAD_REQUEST, xml, "b");
        assert!(
            matches!(e, S3Error::ExpiredToken { .. }) && e.affects_every_request(),
            "{e}"
        );
        assert!(
            e.to_string().starts_with(
                "the session token expired (HTTP 400 ExpiredToken: The provided token has expired.)"
            ),
            "{e}"
        );
        let e = error_document(StatusCode::BAD_GATEWAY, "<html>oops</html>", "b");
        // Retried, and never quoted (issue 28 item 6).
        assert!(e.is_retryable() && !e.to_string().contains("oops"), "{e}");
        assert!(
            e.to_string().contains("not an S3 error document (17 bytes)"),
            "{e}"
        );
    }

    #[test]
    fn the_query_is_sorted_and_encoded() {
        let req = ListRequest {
            prefix: "a b/ü".into(),
            delimiter: Some("/".into()),
            continuation: Some("x+y=".into()),
            max_keys: 1000,
            ..ListRequest::default()
        };
        assert_eq!(
            list_query(&req, Some("a~z")),
            "continuation-token=x%2By%3D&delimiter=%2F&encoding-type=url&list-type=2&max-keys=1000\
             &prefix=a%20b%2F%C3%BC&start-after=a~z"
        );
    }

    /// As MinIO answers `metadata=true` (cmd/api-response.go): names as
    /// stored, values XML-escaped, content-type and SSE headers beside the
    /// user's, an element named like an entry's own (`Size`) inside.
    #[test]
    fn user_metadata_in_a_listing_reads_like_a_head_answer() {
        let xml = "<ListBucketResult><IsTruncated>false</IsTruncated><EncodingType>url</EncodingType>\
            <Contents><Key>a%2Fm</Key><LastModified>2026-11-23T20:51:42.815Z</LastModified>\
            <ETag>&#34;3e44&#34;</ETag><Size>2</Size><StorageClass>STANDARD</StorageClass>\
            <UserMetadata><X-Amz-Meta-Sp>a b=c&amp;d</X-Amz-Meta-Sp><X-Amz-Meta-Empty></X-Amz-Meta-Empty>\
            <content-type>binary/octet-stream</content-type><X-Amz-Meta-U>=?UTF-8?B?R3LDvMOfZQ==?=</X-Amz-Meta-U>\
            <X-Amz-Server-Side-Encryption>AES256</X-Amz-Server-Side-Encryption><X-Amz-Meta-Size>9</X-Amz-Meta-Size>\
            <X-Amz-Meta-Nul/><Size>7</Size></UserMetadata><Internal><K>1</K><M>0</M></Internal></Contents>\
            <Contents><Key>b</Key><Size>1</Size></Contents></ListBucketResult>";
        let page = parse_list(xml).unwrap();
        let listed = *page.objects[0].listed_metadata.clone().unwrap();
        assert_eq!(page.objects[0].size, 2);
        assert_eq!(page.objects[0].etag.as_deref(), Some("3e44"));
        assert_eq!(listed.content_type.as_deref(), Some("binary/octet-stream"));
        let expected: std::collections::BTreeMap<String, String> = [
            ("sp", "a b=c&d"),
            ("empty", ""),
            ("u", "Grüße"),
            ("size", "9"),
            ("nul", ""),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(listed.metadata, expected);
        assert_eq!(
            listed.columns.server_side_encryption.as_deref(),
            Some("AES256"),
            "SSE headers become columns"
        );
        assert_eq!(page.objects[1].listed_metadata, None, "no element is no answer");
    }

    #[test]
    fn metadata_is_asked_for_only_when_wanted() {
        let req = ListRequest {
            max_keys: 10,
            with_metadata: true,
            ..ListRequest::default()
        };
        assert_eq!(
            list_query(&req, None),
            "encoding-type=url&list-type=2&max-keys=10&metadata=true&prefix="
        );
    }

    #[test]
    fn an_entry_is_read_in_one_pass_first_occurrence_first() {
        let entry = "<Key>k</Key><Owner><ID>i</ID><Size>9</Size></Owner><Size>2</Size><ETag/>\
            <UserMetadata><Key>no</Key><StorageClass>no</StorageClass></UserMetadata>\
            <KeyCount>3</KeyCount><StorageClass>GLACIER</StorageClass><Key>second</Key>";
        let fields = EntryFields::of(entry);
        assert_eq!(
            fields,
            EntryFields {
                key: Some("k"),
                // A field inside a container counts, as an element search found it.
                size: Some("9"),
                etag: Some(""),
                last_modified: None,
                storage_class: Some("GLACIER"),
                checksum_algorithm: None,
                checksum_type: None,
                user_tags: None,
                user_metadata: Some("<Key>no</Key><StorageClass>no</StorageClass>"),
            }
        );
        // A tag cut short ends the entry; an element never closed has no
        // text (what follows it is still read).
        assert_eq!(EntryFields::of("<Key>k</Key><Size").size, None);
        assert_eq!(EntryFields::of("<Size>1<Key>k</Key>").size, None);
        assert_eq!(EntryFields::of("<Size>1<Key>k</Key>").key, Some("k"));
        assert_eq!(EntryFields::of("<UserMetadata><A>1</A>").user_metadata, None);
    }

    #[test]
    fn unknown_references_are_kept() {
        assert_eq!(unescape("a &nbsp; b &amp c &#xZZ;"), "a &nbsp; b &amp c &#xZZ;");
    }
}
