//! Plain-text tables and the small formats they use.

use serde_json::Value;

/// Prints rows under a header, each column as wide as its widest cell.
pub(crate) fn print(header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut out = String::new();
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i + 1 == cells.len() {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<w$}  "));
            }
        }
        println!("{}", out.trim_end());
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
}

/// A JSON value as a cell: strings bare, null as `-`.
pub(crate) fn cell(v: &Value) -> String {
    match v {
        Value::Null => "-".to_owned(),
        Value::String(s) => s.clone(),
        Value::Array(a) => a.iter().map(cell).collect::<Vec<_>>().join(","),
        Value::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() => format!("{f:.1}"),
            _ => n.to_string(),
        },
        other => other.to_string(),
    }
}

/// Unix milliseconds as UTC `YYYY-MM-DD HH:MM:SS`, `-` for null (or a
/// time out of jiff's range, years -9999 to 9999).
pub(crate) fn time(v: &Value) -> String {
    v.as_i64()
        .and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
        .map_or_else(
            || "-".to_owned(),
            |t| t.strftime("%Y-%m-%d %H:%M:%S").to_string(),
        )
}

/// A body as a short line: text when it is printable UTF-8, else its size.
pub(crate) fn preview(bytes: &[u8], max: usize) -> String {
    match std::str::from_utf8(bytes) {
        Ok(s) if !s.chars().any(|c| c.is_control() && c != '\n' && c != '\t') => {
            let one_line = s.replace(['\n', '\t'], " ");
            if one_line.chars().count() > max {
                format!("{}…", one_line.chars().take(max).collect::<String>())
            } else {
                one_line
            }
        }
        _ => format!("<{} bytes of binary>", bytes.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_as_utc_dates() {
        assert_eq!(time(&Value::from(0)), "1970-01-01 00:00:00");
        assert_eq!(
            time(&Value::from(951_782_400_000u64)),
            "2000-02-29 00:00:00"
        );
        assert_eq!(
            time(&Value::from(1_795_000_000_123u64)),
            "2026-11-18 11:06:40"
        );
        assert_eq!(time(&Value::Null), "-");
    }

    #[test]
    fn previews_are_one_short_line() {
        assert_eq!(preview(b"a\nb", 10), "a b");
        assert_eq!(preview(b"abcdef", 3), "abc…");
        assert_eq!(preview(&[0, 159, 146, 150], 10), "<4 bytes of binary>");
    }
}
