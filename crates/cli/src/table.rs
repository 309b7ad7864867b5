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

/// Unix milliseconds as UTC `YYYY-MM-DD HH:MM:SS`, `-` for null.
pub(crate) fn time(v: &Value) -> String {
    let Some(ms) = v.as_u64() else {
        return "-".to_owned();
    };
    let secs = ms / 1000;
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// Days since 1970-01-01 as a (year, month, day) of the proleptic
/// Gregorian calendar (Howard Hinnant's `civil_from_days`).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
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
