//! A reference page's generated part: the text between two markers, made from the code. A test
//! compares it with what the code makes now and fails naming the page; `scripts/reference`
//! (`HANDOFF_WRITE_REFERENCE=1`) writes it instead.

use std::path::Path;

const BEGIN: &str = "<!-- generated: begin";
const END: &str = "<!-- generated: end -->";

/// Checks (or, with `HANDOFF_WRITE_REFERENCE=1`, writes) the generated part of `page` (a path
/// from the crate's root).
pub fn check(page: &str, generated: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(page);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{page}: {e}"));
    let start = text.find(BEGIN).unwrap_or_else(|| panic!("{page} has no `{BEGIN}` marker"));
    let body = start + text[start..].find("-->").expect("the begin marker ends") + "-->\n".len();
    let end = text[body..].find(END).map(|i| body + i).unwrap_or_else(|| panic!("{page} has no `{END}` marker"));
    if text[body..end] == *generated {
        return;
    }
    if std::env::var_os("HANDOFF_WRITE_REFERENCE").is_some() {
        std::fs::write(&path, format!("{}{generated}{}", &text[..body], &text[end..])).unwrap();
        return;
    }
    let first = text[body..end].lines().zip(generated.lines()).position(|(a, b)| a != b);
    let line = first.map_or_else(|| "its length".to_owned(), |i| format!("line {}", i + 1));
    panic!(
        "{page}'s generated part differs from the code (first at {line} of it): run scripts/reference \
         and commit the page"
    );
}
