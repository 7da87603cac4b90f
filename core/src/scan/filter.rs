//! Object filters (issue 30, item 5): which listed objects a scan keeps,
//! judged from the LIST entry alone (LastModified, size, key, storage
//! class), so an object filtered out costs no HEAD and leaves no record.
//! The engine drops them before they become tasks (`engine::list_shard`)
//! and counts them as `filtered`, apart from the objects scanned.
//!
//! What each bound means (docs/results.md, "Filters"):
//! - time: `[modified_after, modified_before)`, half-open, so consecutive
//!   windows (one night's `before` the next night's `after`) tile time with
//!   no object in two or in none. Written as RFC 3339 or as a date
//!   (`2026-05-01`: midnight UTC); compared with the listing's LastModified.
//! - size: `[min_size, max_size]`, both inclusive, in bytes.
//! - key: kept when it matches any `include` glob (none: every key) and no
//!   `exclude` glob. A glob matches the whole key, the scan's prefix
//!   included, case-sensitively, as gitignore does: `*` and `?` never cross
//!   `/`, `**` does (`logs/**`, `**/*.csv`, `a/**/b`; `**/` also matches no
//!   folder at all), `[abc]`, `[a-z]`, `[!abc]` match one character, and `\`
//!   makes the next character literal (`\*`).
//! - storage class: one of `storage_classes` (none: any), without regard to
//!   case; an entry the listing gives no class is `STANDARD`, as its record
//!   says.
//!
//! An entry whose LastModified is missing or unreadable is kept under a
//! time bound: the filter drops only what it can tell is outside.
//!
//! Globs are translated to `regex-lite` (already in the dependency tree
//! through aws-sdk-s3, no crate added): its matcher is linear in the key
//! whatever the pattern, where a backtracking glob matcher (the `glob`
//! crate's) is exponential in the `*`s of a pattern, and a scan matches
//! every key of the bucket against user-written patterns. `globset` would
//! pull `regex` and `aho-corasick` into the worker for features not needed
//! here.
//!
//! May import: `s3` (its types). Pure: no I/O.

use crate::s3::ListedObject;
use serde::{Deserialize, Serialize};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// Longest glob, in bytes: S3's longest key (escapes aside, a glob longer
/// than any key can match none).
pub const MAX_GLOB_BYTES: usize = 1024;
/// Most globs in `include`, and in `exclude`: each is matched against every
/// key listed.
pub const MAX_GLOBS: usize = 100;
/// Most storage classes named (S3 has about a dozen).
pub const MAX_STORAGE_CLASSES: usize = 16;

/// The filter as written, in a scan's spec and its manifest. Unset fields
/// filter nothing; [`ObjectFilter`] checks it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FilterSpec {
    /// RFC 3339 (UTC, as [`ObjectFilter`] normalises it): keep objects
    /// modified at or after it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub modified_after: Option<String>,
    /// Keep objects modified strictly before it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub modified_before: Option<String>,
    /// Keep objects of at least this many bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_size: Option<u64>,
    /// Keep objects of at most this many bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_size: Option<u64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub include: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub exclude: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub storage_classes: Vec<String>,
}

/// Why a filter cannot be used: said before anything is listed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FilterError {
    #[error("the modified-{bound} time {value:?} {reason}")]
    BadTime {
        bound: &'static str,
        value: String,
        reason: TimeError,
    },
    #[error(
        "the modified-after time {after} is not before the modified-before time {before}: no object \
         can match (the window is [after, before), the end excluded)"
    )]
    EmptyWindow { after: String, before: String },
    #[error("the minimum size {min} is above the maximum size {max} (bytes): no object can match")]
    EmptySizeRange { min: u64, max: u64 },
    #[error("{list} glob {glob:?}: {reason}")]
    BadGlob {
        list: &'static str,
        glob: String,
        reason: GlobError,
    },
    #[error(
        "{class:?} is not a storage class name: use 1-64 letters, digits, '_' or '-', such as \
         STANDARD, STANDARD_IA or GLACIER_IR"
    )]
    BadStorageClass { class: String },
    #[error("{count} {list} are too many: at most {max}")]
    TooMany {
        list: &'static str,
        count: usize,
        max: usize,
    },
    #[error(
        "include glob {glob:?} can never match a key under the prefix {prefix:?}: a glob matches the \
         whole key, prefix included, and '*' and '?' stop at '/' ({hint})"
    )]
    NeverUnderPrefix {
        glob: String,
        prefix: String,
        hint: String,
    },
}

/// Why a time bound cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimeError {
    #[error("is neither an RFC 3339 time (2026-05-01T00:00:00Z, 2026-05-01T02:00:00+02:00) nor a date (2026-05-01, midnight UTC)")]
    Unreadable,
}

/// Why a glob cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GlobError {
    #[error("a glob cannot be empty")]
    Empty,
    #[error("{bytes} bytes is longer than any key ({MAX_GLOB_BYTES} bytes at most)")]
    TooLong { bytes: usize },
    #[error("it ends with a lone '\\' (escape a backslash as '\\\\')")]
    TrailingBackslash,
    #[error("the '[' at character {position} has no closing ']' (match a literal '[' with '\\[')")]
    UnclosedClass { position: usize },
    #[error("the range {from}-{to} in the class at character {position} runs backwards")]
    BackwardRange { position: usize, from: char, to: char },
    #[error("cannot be compiled: {0}")]
    Compile(String),
}

/// One glob, compiled.
#[derive(Clone, Debug)]
pub struct KeyGlob {
    source: String,
    regex: regex_lite::Regex,
    /// The key's start that every match shares (up to the first wildcard).
    literal_prefix: String,
    /// How many `/` every key it matches holds, when that is fixed (no
    /// `**`, no class that matches `/`).
    depth: Option<usize>,
}

impl PartialEq for KeyGlob {
    fn eq(&self, other: &KeyGlob) -> bool {
        self.source == other.source
    }
}

impl KeyGlob {
    pub fn new(glob: &str) -> Result<KeyGlob, GlobError> {
        if glob.is_empty() {
            return Err(GlobError::Empty);
        }
        if glob.len() > MAX_GLOB_BYTES {
            return Err(GlobError::TooLong { bytes: glob.len() });
        }
        let translated = translate(glob)?;
        let regex =
            regex_lite::Regex::new(&translated.pattern).map_err(|e| GlobError::Compile(e.to_string()))?;
        Ok(KeyGlob {
            source: glob.to_string(),
            regex,
            literal_prefix: translated.literal_prefix,
            depth: translated.depth,
        })
    }

    pub fn matches(&self, key: &str) -> bool {
        key.starts_with(&self.literal_prefix) && self.regex.is_match(key)
    }

    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// What every key it matches starts with.
    pub fn literal_prefix(&self) -> &str {
        &self.literal_prefix
    }
}

/// What a glob's translation tells of it.
struct Translated {
    /// An anchored regular expression.
    pattern: String,
    literal_prefix: String,
    depth: Option<usize>,
}

/// The glob as an anchored regular expression, and what every key it
/// matches shares.
fn translate(glob: &str) -> Result<Translated, GlobError> {
    let chars: Vec<char> = glob.chars().collect();
    // `s`: `.` (inside `**`) matches a newline too, which keys may hold.
    let mut re = String::from("(?s)^");
    let mut literal = String::new();
    let mut literal_open = true;
    let mut slashes = 0;
    let mut fixed_depth = true;
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '\\' => {
                let c = *chars.get(i + 1).ok_or(GlobError::TrailingBackslash)?;
                push_literal(&mut re, c);
                if literal_open {
                    literal.push(c);
                }
                slashes += (c == '/') as usize;
                i += 2;
            }
            '*' => {
                literal_open = false;
                let run = chars[i..].iter().take_while(|c| **c == '*').count();
                let starts_segment = i == 0 || chars[i - 1] == '/';
                i += run;
                fixed_depth &= run == 1;
                if run == 1 {
                    re.push_str("[^/]*");
                } else if starts_segment && chars.get(i) == Some(&'/') {
                    // `**/`: any number of whole folders, none included.
                    re.push_str("(?:.*/)?");
                    i += 1;
                } else {
                    re.push_str(".*");
                }
            }
            '?' => {
                literal_open = false;
                re.push_str("[^/]");
                i += 1;
            }
            '[' => {
                literal_open = false;
                let (next, may_match_slash) = class(&chars, i, &mut re)?;
                fixed_depth &= !may_match_slash;
                i = next;
            }
            c => {
                push_literal(&mut re, c);
                if literal_open {
                    literal.push(c);
                }
                slashes += (c == '/') as usize;
                i += 1;
            }
        }
    }
    re.push('$');
    Ok(Translated {
        pattern: re,
        literal_prefix: literal,
        depth: fixed_depth.then_some(slashes),
    })
}

fn push_literal(re: &mut String, c: char) {
    re.push_str(&regex_lite::escape(c.encode_utf8(&mut [0; 4])));
}

/// The class opening at `chars[start]` (`[`) into `re`; returns the index
/// after its `]`, and whether it may match `/`. `[!...]` and `[^...]`
/// negate, and never match `/`; a `]` first in the class is a member.
fn class(chars: &[char], start: usize, re: &mut String) -> Result<(usize, bool), GlobError> {
    let unclosed = GlobError::UnclosedClass { position: start + 1 };
    let mut i = start + 1;
    let negated = matches!(chars.get(i), Some('!' | '^'));
    if negated {
        i += 1;
    }
    let mut members = String::new();
    let mut may_match_slash = false;
    let mut first = true;
    loop {
        let mut c = *chars.get(i).ok_or_else(|| unclosed.clone())?;
        if c == ']' && !first {
            break;
        }
        first = false;
        if c == '\\' {
            i += 1;
            c = *chars.get(i).ok_or_else(|| unclosed.clone())?;
        }
        i += 1;
        let range_end = match (chars.get(i), chars.get(i + 1)) {
            (Some('-'), Some(&end)) if end != ']' => Some(end),
            _ => None,
        };
        push_literal(&mut members, c);
        may_match_slash |= c == '/';
        if let Some(mut end) = range_end {
            i += 2;
            if end == '\\' {
                end = *chars.get(i).ok_or_else(|| unclosed.clone())?;
                i += 1;
            }
            if end < c {
                return Err(GlobError::BackwardRange {
                    position: start + 1,
                    from: c,
                    to: end,
                });
            }
            members.push('-');
            push_literal(&mut members, end);
            may_match_slash |= (c..=end).contains(&'/');
        }
    }
    re.push('[');
    if negated {
        re.push_str("^/");
    }
    re.push_str(&members);
    re.push(']');
    Ok((i + 1, !negated && may_match_slash))
}

/// An RFC 3339 time or a date (midnight UTC).
pub fn parse_time(text: &str) -> Result<OffsetDateTime, TimeError> {
    if let Ok(t) = OffsetDateTime::parse(text, &Rfc3339) {
        return Ok(t);
    }
    let date =
        time::format_description::parse_borrowed::<2>("[year]-[month]-[day]").expect("a valid description");
    time::Date::parse(text, &date)
        .map(|d| d.midnight().assume_utc())
        .map_err(|_| TimeError::Unreadable)
}

/// `text` as a time bound, in the form a spec stores it: RFC 3339 in UTC.
pub fn canonical_time(text: &str) -> Result<String, TimeError> {
    let t = parse_time(text)?.to_offset(time::UtcOffset::UTC);
    Ok(t.format(&Rfc3339).expect("a UTC time formats"))
}

/// A storage class name as the filter takes it.
pub fn check_storage_class(class: &str) -> Result<(), FilterError> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-');
    if class.is_empty() || class.len() > 64 || !class.chars().all(allowed) {
        return Err(FilterError::BadStorageClass {
            class: class.to_string(),
        });
    }
    Ok(())
}

/// A checked filter, ready for [`ObjectFilter::admits`]. Stored as its
/// [`FilterSpec`] (normalised), and checked again when read.
/// One pointer wide: it rides in every scan spec and engine, whose futures
/// are large already (a larger spec overflowed a debug build's stack).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(try_from = "FilterSpec", into = "FilterSpec")]
pub struct ObjectFilter {
    inner: std::sync::Arc<Compiled>,
}

#[derive(Debug, Default)]
struct Compiled {
    spec: FilterSpec,
    after: Option<OffsetDateTime>,
    before: Option<OffsetDateTime>,
    include: Vec<KeyGlob>,
    exclude: Vec<KeyGlob>,
}

impl PartialEq for ObjectFilter {
    fn eq(&self, other: &ObjectFilter) -> bool {
        self.inner.spec == other.inner.spec
    }
}

impl TryFrom<FilterSpec> for ObjectFilter {
    type Error = FilterError;
    fn try_from(spec: FilterSpec) -> Result<ObjectFilter, FilterError> {
        ObjectFilter::new(spec)
    }
}

impl From<ObjectFilter> for FilterSpec {
    fn from(filter: ObjectFilter) -> FilterSpec {
        filter.inner.spec.clone()
    }
}

impl ObjectFilter {
    pub fn new(mut spec: FilterSpec) -> Result<ObjectFilter, FilterError> {
        let time = |bound: &'static str, value: &Option<String>| {
            value
                .as_deref()
                .map(|v| {
                    parse_time(v).map_err(|reason| FilterError::BadTime {
                        bound,
                        value: v.to_string(),
                        reason,
                    })
                })
                .transpose()
        };
        let after = time("after", &spec.modified_after)?;
        let before = time("before", &spec.modified_before)?;
        if let (Some(a), Some(b)) = (after, before) {
            if a >= b {
                return Err(FilterError::EmptyWindow {
                    after: format_utc(a),
                    before: format_utc(b),
                });
            }
        }
        spec.modified_after = after.map(format_utc);
        spec.modified_before = before.map(format_utc);
        if let (Some(min), Some(max)) = (spec.min_size, spec.max_size) {
            if min > max {
                return Err(FilterError::EmptySizeRange { min, max });
            }
        }
        let include = globs("include", &spec.include)?;
        let exclude = globs("exclude", &spec.exclude)?;
        if spec.storage_classes.len() > MAX_STORAGE_CLASSES {
            return Err(FilterError::TooMany {
                list: "storage classes",
                count: spec.storage_classes.len(),
                max: MAX_STORAGE_CLASSES,
            });
        }
        for class in &spec.storage_classes {
            check_storage_class(class)?;
        }
        Ok(ObjectFilter {
            inner: std::sync::Arc::new(Compiled {
                spec,
                after,
                before,
                include,
                exclude,
            }),
        })
    }

    /// The filter as written (normalised).
    pub fn spec(&self) -> &FilterSpec {
        &self.inner.spec
    }

    /// Keeps every object.
    pub fn is_empty(&self) -> bool {
        self.inner.spec == FilterSpec::default()
    }

    /// Does the scan keep this listed object? The cheap tests first: most
    /// filters are on time or size, and a key is matched only when they pass.
    pub fn admits(&self, obj: &ListedObject) -> bool {
        self.admits_size(obj.size)
            && self.admits_storage_class(obj.storage_class.as_deref())
            && self.admits_modified(obj.last_modified.as_deref())
            && self.admits_key(&obj.key)
    }

    fn admits_size(&self, size: u64) -> bool {
        self.inner.spec.min_size.is_none_or(|min| size >= min)
            && self.inner.spec.max_size.is_none_or(|max| size <= max)
    }

    fn admits_storage_class(&self, class: Option<&str>) -> bool {
        let class = class.unwrap_or("STANDARD");
        self.inner.spec.storage_classes.is_empty()
            || self
                .inner
                .spec
                .storage_classes
                .iter()
                .any(|c| c.eq_ignore_ascii_case(class))
    }

    fn admits_modified(&self, last_modified: Option<&str>) -> bool {
        if self.inner.after.is_none() && self.inner.before.is_none() {
            return true;
        }
        let Some(t) = last_modified.and_then(|t| OffsetDateTime::parse(t, &Rfc3339).ok()) else {
            return true; // nothing to judge by: kept (see the module doc)
        };
        self.inner.after.is_none_or(|a| t >= a) && self.inner.before.is_none_or(|b| t < b)
    }

    /// Kept by the key globs alone.
    pub fn admits_key(&self, key: &str) -> bool {
        (self.inner.include.is_empty() || self.inner.include.iter().any(|g| g.matches(key)))
            && !self.inner.exclude.iter().any(|g| g.matches(key))
    }

    /// Refuse include globs that no key under `prefix` can match: a glob
    /// written relative to the prefix (`*.csv` under `logs/`) would quietly
    /// keep nothing.
    pub fn check_prefix(&self, prefix: &str) -> Result<(), FilterError> {
        for glob in &self.inner.include {
            let literal = glob.literal_prefix();
            // Too few folders: `*.csv` under `logs/` (`*` stops at `/`).
            let too_shallow = glob.depth.is_some_and(|d| d < prefix.matches('/').count());
            let diverges = !literal.starts_with(prefix) && !prefix.starts_with(literal);
            if too_shallow || diverges {
                let hint = if !diverges && !literal.is_empty() {
                    "'**' crosses folders".to_string()
                } else {
                    format!("did you mean {:?}?", format!("{prefix}{}", glob.as_str()))
                };
                return Err(FilterError::NeverUnderPrefix {
                    glob: glob.as_str().to_string(),
                    prefix: prefix.to_string(),
                    hint,
                });
            }
        }
        Ok(())
    }

    /// The narrowest prefix a listing of `prefix` may start from and still
    /// see every key the include globs match: the longest start they all
    /// share, when it lies under `prefix`.
    pub fn listing_prefix(&self, prefix: &str) -> String {
        let mut globs = self.inner.include.iter().map(KeyGlob::literal_prefix);
        let Some(first) = globs.next() else {
            return prefix.to_string();
        };
        let shared = globs.fold(first.to_string(), |shared, literal| {
            common_start(&shared, literal)
        });
        if shared.starts_with(prefix) {
            shared
        } else {
            prefix.to_string()
        }
    }
}

fn format_utc(t: OffsetDateTime) -> String {
    t.to_offset(time::UtcOffset::UTC)
        .format(&Rfc3339)
        .expect("a UTC time formats")
}

fn globs(list: &'static str, sources: &[String]) -> Result<Vec<KeyGlob>, FilterError> {
    if sources.len() > MAX_GLOBS {
        return Err(FilterError::TooMany {
            list: if list == "include" {
                "include globs"
            } else {
                "exclude globs"
            },
            count: sources.len(),
            max: MAX_GLOBS,
        });
    }
    sources
        .iter()
        .map(|g| {
            KeyGlob::new(g).map_err(|reason| FilterError::BadGlob {
                list,
                glob: g.clone(),
                reason,
            })
        })
        .collect()
}

/// The longest start two strings share (whole characters).
fn common_start(a: &str, b: &str) -> String {
    a.chars()
        .zip(b.chars())
        .take_while(|(x, y)| x == y)
        .map(|(x, _)| x)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn glob(g: &str) -> KeyGlob {
        KeyGlob::new(g).unwrap()
    }

    fn obj(key: &str, size: u64, modified: &str, class: Option<&str>) -> ListedObject {
        ListedObject {
            key: key.into(),
            size,
            etag: None,
            last_modified: Some(modified.into()),
            storage_class: class.map(str::to_string),
            listed_metadata: None,
            checksum_algorithm: None,
            checksum_type: None,
        }
    }

    fn filter(spec: FilterSpec) -> ObjectFilter {
        ObjectFilter::new(spec).unwrap()
    }

    #[test]
    fn star_stays_within_a_folder_and_double_star_crosses_them() {
        let g = glob("logs/*.csv");
        assert!(g.matches("logs/a.csv"));
        assert!(g.matches("logs/.csv"), "* matches nothing too");
        assert!(!g.matches("logs/2026/a.csv"), "* does not cross /");
        assert!(!g.matches("logs/a.csv.gz"), "the whole key is matched");
        assert!(!g.matches("xlogs/a.csv"), "anchored at the key's start");

        let g = glob("logs/**");
        assert!(g.matches("logs/a"));
        assert!(g.matches("logs/2026/05/a.csv"));
        assert!(!g.matches("logs"), "logs/** is what is inside logs/");

        let g = glob("**/*.csv");
        assert!(g.matches("a.csv"), "**/ matches no folder at all");
        assert!(g.matches("x/y/z/a.csv"));
        assert!(!g.matches("x/a.csv.gz"));

        let g = glob("a/**/b");
        for key in ["a/b", "a/x/b", "a/x/y/b"] {
            assert!(g.matches(key), "{key}");
        }
        assert!(!g.matches("a/xb"));

        let g = glob("logs/**.gz");
        assert!(g.matches("logs/x/y.gz"), "** elsewhere crosses / too");
        assert!(glob("**").matches("any/key/at/all"));
        assert!(glob("***").matches("a/b"), "a run of stars is **");
    }

    #[test]
    fn question_marks_and_classes_match_one_character_never_a_slash() {
        let g = glob("img-?.png");
        assert!(g.matches("img-1.png"));
        assert!(!g.matches("img-12.png"));
        assert!(!g.matches("img-/.png"));

        let g = glob("v[0-9][abc].txt");
        assert!(g.matches("v7b.txt"));
        assert!(!g.matches("v7d.txt"));
        assert!(!g.matches("vxb.txt"));

        let g = glob("[!a-c]*");
        assert!(g.matches("dog"));
        assert!(!g.matches("cat"));
        assert!(!g.matches("/x"), "a negated class never matches /");
        assert!(glob("[^a]x").matches("bx"), "[^...] negates as [!...] does");

        let g = glob("[]x]y");
        assert!(g.matches("]y"), "] first in a class is a member");
        assert!(g.matches("xy"));
        assert!(glob("[a\\-z]").matches("-"), "an escaped - is a member");
        assert!(!glob("[a\\-z]").matches("b"));
        assert!(glob("[-a]").matches("-"));
        assert!(
            glob("[.^$|(){}+&&~~]").matches("&"),
            "regex syntax inside a class is literal"
        );
    }

    #[test]
    fn regex_syntax_and_escapes_are_literal() {
        let g = glob("a.b+(c)|d$^{2}");
        assert!(g.matches("a.b+(c)|d$^{2}"));
        assert!(!g.matches("aXb+(c)|d$^{2}"));
        let g = glob("star\\*\\?\\[x]");
        assert!(g.matches("star*?[x]"));
        assert!(!g.matches("starX?[x]"));
        assert_eq!(g.literal_prefix(), "star*?[x]");
        assert!(glob("back\\\\slash").matches("back\\slash"));
    }

    #[test]
    fn utf8_keys_match_character_by_character() {
        let g = glob("fotos/?ño/*.jpg");
        assert!(g.matches("fotos/año/é.jpg"));
        assert!(!g.matches("fotos/aaño/é.jpg"));
        assert!(glob("日本/[日月]?/**").matches("日本/月火/x/y"));
        assert!(
            glob("*").matches("a\nb"),
            "* matches a newline (keys may hold one)"
        );
        assert!(glob("**").matches("a/\n/b"));
    }

    #[test]
    fn case_matters_in_globs() {
        assert!(!glob("*.CSV").matches("a.csv"));
    }

    #[test]
    fn bad_globs_say_what_is_wrong() {
        assert_eq!(KeyGlob::new(""), Err(GlobError::Empty));
        assert_eq!(KeyGlob::new("a\\"), Err(GlobError::TrailingBackslash));
        assert_eq!(
            KeyGlob::new("a[bc"),
            Err(GlobError::UnclosedClass { position: 2 })
        );
        assert_eq!(KeyGlob::new("a[]"), Err(GlobError::UnclosedClass { position: 2 }));
        assert_eq!(
            KeyGlob::new("[z-a]"),
            Err(GlobError::BackwardRange {
                position: 1,
                from: 'z',
                to: 'a'
            })
        );
        assert_eq!(
            KeyGlob::new(&"a".repeat(1025)),
            Err(GlobError::TooLong { bytes: 1025 })
        );
        assert!(KeyGlob::new(&"a".repeat(1024)).is_ok());
        let e = ObjectFilter::new(FilterSpec {
            exclude: vec!["ok/*".into(), "a[bc".into()],
            ..FilterSpec::default()
        })
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "exclude glob \"a[bc\": the '[' at character 2 has no closing ']' (match a literal '[' with '\\[')"
        );
    }

    #[test]
    fn many_stars_stay_fast() {
        // A backtracking matcher takes exponential time on this.
        let g = glob(&format!("{}b", "*a".repeat(30)));
        let key = "a".repeat(1000);
        let started = std::time::Instant::now();
        assert!(!g.matches(&key));
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
    }

    #[test]
    fn the_time_window_keeps_after_and_drops_before() {
        let f = filter(FilterSpec {
            modified_after: Some("2026-05-01".into()),
            modified_before: Some("2026-05-02T00:00:00Z".into()),
            ..FilterSpec::default()
        });
        let at = |t: &str| f.admits(&obj("k", 1, t, None));
        assert!(at("2026-05-01T00:00:00.000Z"), "after is inclusive");
        assert!(at("2026-05-01T23:59:59.999Z"));
        assert!(!at("2026-05-02T00:00:00.000Z"), "before is exclusive");
        assert!(!at("2026-04-30T23:59:59.999Z"));
        assert!(at("2026-05-01T01:00:00+01:00"), "offsets are honoured: 00:00Z");
        assert!(!at("2026-05-01T00:59:59+01:00"));
        let unknown_time = ListedObject {
            last_modified: None,
            ..obj("k", 1, "", None)
        };
        assert!(f.admits(&unknown_time), "no LastModified: kept");
        assert!(at("not a time"), "an unreadable LastModified: kept");
        assert_eq!(f.spec().modified_after.as_deref(), Some("2026-05-01T00:00:00Z"));

        let only_after = filter(FilterSpec {
            modified_after: Some("2026-05-01T12:00:00+02:00".into()),
            ..FilterSpec::default()
        });
        assert_eq!(
            only_after.spec().modified_after.as_deref(),
            Some("2026-05-01T10:00:00Z")
        );
        assert!(only_after.admits(&obj("k", 1, "2030-01-01T00:00:00Z", None)));
        assert!(!only_after.admits(&obj("k", 1, "2026-05-01T09:59:59Z", None)));
    }

    #[test]
    fn bad_times_and_empty_windows_are_refused() {
        for bad in [
            "yesterday",
            "2026-13-01",
            "2026-05-01 00:00:00",
            "2026-05-01T00:00:00",
            "",
        ] {
            let e = ObjectFilter::new(FilterSpec {
                modified_before: Some(bad.into()),
                ..FilterSpec::default()
            })
            .unwrap_err();
            assert!(
                e.to_string().starts_with(&format!(
                    "the modified-before time {bad:?} is neither an RFC 3339 time"
                )),
                "{e}"
            );
        }
        let e = ObjectFilter::new(FilterSpec {
            modified_after: Some("2026-05-02".into()),
            modified_before: Some("2026-05-02T00:00:00Z".into()),
            ..FilterSpec::default()
        })
        .unwrap_err();
        assert_eq!(
            e,
            FilterError::EmptyWindow {
                after: "2026-05-02T00:00:00Z".into(),
                before: "2026-05-02T00:00:00Z".into()
            }
        );
    }

    #[test]
    fn the_size_range_is_inclusive_at_both_ends() {
        let f = filter(FilterSpec {
            min_size: Some(10),
            max_size: Some(20),
            ..FilterSpec::default()
        });
        let sized = |n| f.admits(&obj("k", n, "2026-01-01T00:00:00Z", None));
        assert!(!sized(9));
        assert!(sized(10));
        assert!(sized(20));
        assert!(!sized(21));
        let empty_objects_only = filter(FilterSpec {
            max_size: Some(0),
            ..FilterSpec::default()
        });
        assert!(empty_objects_only.admits(&obj("k", 0, "2026-01-01T00:00:00Z", None)));
        assert!(!empty_objects_only.admits(&obj("k", 1, "2026-01-01T00:00:00Z", None)));
        assert_eq!(
            ObjectFilter::new(FilterSpec {
                min_size: Some(21),
                max_size: Some(20),
                ..FilterSpec::default()
            })
            .unwrap_err()
            .to_string(),
            "the minimum size 21 is above the maximum size 20 (bytes): no object can match"
        );
    }

    #[test]
    fn storage_classes_match_without_case_and_unset_is_standard() {
        let f = filter(FilterSpec {
            storage_classes: vec!["standard".into(), "GLACIER_IR".into()],
            ..FilterSpec::default()
        });
        let class = |c| f.admits(&obj("k", 1, "2026-01-01T00:00:00Z", c));
        assert!(class(Some("STANDARD")));
        assert!(class(None), "no class in the listing is STANDARD");
        assert!(class(Some("GLACIER_IR")));
        assert!(!class(Some("GLACIER")));
        for bad in ["", "GLACIER IR", "x".repeat(65).as_str(), "STANDARD/IA"] {
            let e = ObjectFilter::new(FilterSpec {
                storage_classes: vec![bad.into()],
                ..FilterSpec::default()
            })
            .unwrap_err();
            assert_eq!(e, FilterError::BadStorageClass { class: bad.into() });
        }
    }

    #[test]
    fn include_and_exclude_globs_combine_and_exclude_wins() {
        let f = filter(FilterSpec {
            include: vec!["logs/**/*.csv".into(), "*.parquet".into()],
            exclude: vec!["logs/tmp/**".into()],
            ..FilterSpec::default()
        });
        assert!(f.admits_key("logs/2026/a.csv"));
        assert!(f.admits_key("b.parquet"));
        assert!(!f.admits_key("logs/tmp/a.csv"), "exclude wins");
        assert!(!f.admits_key("logs/a.json"));
        assert!(!f.admits_key("x/b.parquet"));
        let only_exclude = filter(FilterSpec {
            exclude: vec!["**/_SUCCESS".into()],
            ..FilterSpec::default()
        });
        assert!(only_exclude.admits_key("a/b"));
        assert!(!only_exclude.admits_key("a/_SUCCESS"));
    }

    #[test]
    fn every_test_must_pass_for_an_object_to_be_kept() {
        let f = filter(FilterSpec {
            modified_after: Some("2026-01-01".into()),
            min_size: Some(1),
            include: vec!["a/*".into()],
            storage_classes: vec!["STANDARD".into()],
            ..FilterSpec::default()
        });
        assert!(f.admits(&obj("a/x", 1, "2026-02-01T00:00:00Z", None)));
        assert!(!f.admits(&obj("b/x", 1, "2026-02-01T00:00:00Z", None)));
        assert!(!f.admits(&obj("a/x", 0, "2026-02-01T00:00:00Z", None)));
        assert!(!f.admits(&obj("a/x", 1, "2025-02-01T00:00:00Z", None)));
        assert!(!f.admits(&obj("a/x", 1, "2026-02-01T00:00:00Z", Some("GLACIER"))));
        assert!(ObjectFilter::default().admits(&obj("k", 0, "", Some("GLACIER"))));
        assert!(ObjectFilter::default().is_empty());
        assert!(!f.is_empty());
    }

    #[test]
    fn include_globs_are_checked_against_the_prefix() {
        let f = filter(FilterSpec {
            include: vec!["*.csv".into()],
            ..FilterSpec::default()
        });
        assert_eq!(f.check_prefix(""), Ok(()));
        assert_eq!(
            f.check_prefix("logs/").unwrap_err().to_string(),
            "include glob \"*.csv\" can never match a key under the prefix \"logs/\": a glob matches the \
             whole key, prefix included, and '*' and '?' stop at '/' (did you mean \"logs/*.csv\"?)"
        );
        let under = filter(FilterSpec {
            include: vec!["logs/2026/*.csv".into(), "lo*/2026/*".into()],
            ..FilterSpec::default()
        });
        assert_eq!(under.check_prefix("logs/"), Ok(()), "lo*/ may match under logs/");
        assert_eq!(
            under.check_prefix("logs/2026/05/").unwrap_err().to_string(),
            "include glob \"logs/2026/*.csv\" can never match a key under the prefix \"logs/2026/05/\": a \
             glob matches the whole key, prefix included, and '*' and '?' stop at '/' ('**' crosses folders)"
        );
        assert!(under.check_prefix("data/").is_err());
        let deep = filter(FilterSpec {
            include: vec!["*/*/*.csv".into(), "**/*.csv".into(), "[+-0]*".into()],
            ..FilterSpec::default()
        });
        assert_eq!(
            deep.check_prefix("logs/2026/"),
            Ok(()),
            "deep enough, or of any depth"
        );
    }

    #[test]
    fn the_listing_starts_where_every_include_glob_starts() {
        let f = filter(FilterSpec {
            include: vec!["logs/2026-05-*/a".into(), "logs/2026-06/**".into()],
            ..FilterSpec::default()
        });
        assert_eq!(f.listing_prefix(""), "logs/2026-0");
        assert_eq!(f.listing_prefix("logs/"), "logs/2026-0");
        assert_eq!(f.listing_prefix("logs/2026-05-01/"), "logs/2026-05-01/");
        assert_eq!(ObjectFilter::default().listing_prefix("p/"), "p/");
        let anywhere = filter(FilterSpec {
            include: vec!["**/*.csv".into()],
            ..FilterSpec::default()
        });
        assert_eq!(anywhere.listing_prefix("x/"), "x/");
        let utf8 = filter(FilterSpec {
            include: vec!["año/x*".into(), "añu/*".into()],
            ..FilterSpec::default()
        });
        assert_eq!(utf8.listing_prefix(""), "añ");
    }

    #[test]
    fn too_many_globs_or_classes_are_refused() {
        let e = ObjectFilter::new(FilterSpec {
            include: vec!["a".into(); MAX_GLOBS + 1],
            ..FilterSpec::default()
        })
        .unwrap_err();
        assert_eq!(e.to_string(), "101 include globs are too many: at most 100");
        let e = ObjectFilter::new(FilterSpec {
            storage_classes: vec!["STANDARD".into(); MAX_STORAGE_CLASSES + 1],
            ..FilterSpec::default()
        })
        .unwrap_err();
        assert_eq!(e.to_string(), "17 storage classes are too many: at most 16");
    }

    #[test]
    fn a_filter_is_stored_as_its_normalised_spec_and_checked_when_read() {
        let f = filter(FilterSpec {
            modified_after: Some("2026-05-01".into()),
            include: vec!["a/*".into()],
            ..FilterSpec::default()
        });
        let json = serde_json::to_string(&f).unwrap();
        assert_eq!(
            json,
            r#"{"modified_after":"2026-05-01T00:00:00Z","include":["a/*"]}"#
        );
        let back: ObjectFilter = serde_json::from_str(&json).unwrap();
        assert_eq!(back, f);
        assert!(back.admits_key("a/b") && !back.admits_key("b"));
        assert_eq!(serde_json::to_string(&ObjectFilter::default()).unwrap(), "{}");
        let bad = serde_json::from_str::<ObjectFilter>(r#"{"min_size":2,"max_size":1}"#).unwrap_err();
        assert!(
            bad.to_string()
                .contains("the minimum size 2 is above the maximum size 1"),
            "{bad}"
        );
    }
}
